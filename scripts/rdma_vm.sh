#!/usr/bin/env bash
# Runs a command where a real RDMA device exists: a throw-away QEMU guest booting Debian's
# kernel, which loads soft-RoCE (rdma_rxe) and brings up rxe0, so rdma-core's verbs, RC
# queue pairs and one-sided RDMA READs run for real. The guest's root file system is this
# machine's own / (read-only over virtio-9p, with writes kept in guest memory), so the
# command sees the same binaries and build trees, in the same directory. Exits with the
# command's status (125 when the guest never reported one).
#
#   scripts/rdma_vm.sh [--timeout SECONDS] -- COMMAND [ARGS...]
#
# In the guest RXE_DEV=rxe0 and RXE_GID_INDEX (the RoCE v2 IPv4 GID) are set. Packages
# (Debian): qemu-system-x86 linux-image-amd64 busybox-static cpio kmod iproute2 rdma-core
# ibverbs-providers. Without KVM the guest runs under software emulation: correct, slow.
set -euo pipefail
timeout=900
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) timeout=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { sed -n '2,13p' "$0"; exit 2; }

# A kernel that ships rdma_rxe (the host may run another kernel, as it does here).
kernel=""
for image in $(ls /boot/vmlinuz-* 2>/dev/null | sort -rV); do
  version=${image#/boot/vmlinuz-}
  if [ -e "/lib/modules/$version/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko" ]; then
    kernel=$version
    break
  fi
done
[ -n "$kernel" ] || { echo "rdma_vm: no /boot kernel with rdma_rxe (apt-get install linux-image-amd64)" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null || { echo "rdma_vm: qemu-system-x86_64 is missing" >&2; exit 2; }
[ -x /bin/busybox ] || { echo "rdma_vm: /bin/busybox is missing (busybox-static)" >&2; exit 2; }

# The initramfs: busybox and the modules that mount the host's root over 9p.
cache=${XDG_CACHE_HOME:-/tmp}/quiver-rdma-vm
initrd=$cache/initrd-$kernel.cpio.gz
mkdir -p "$cache"
if [ ! -s "$initrd" ] || [ "$0" -nt "$initrd" ]; then
  work=$(mktemp -d)
  mkdir -p "$work"/{bin,dev,proc,sys,mnt,root,lower,upper,job}
  cp /bin/busybox "$work/bin/busybox"
  modules=""
  for module in virtio_pci 9pnet_virtio 9p overlay; do
    for path in $(modprobe --show-depends -S "$kernel" "$module" | awk '$1 == "insmod" {print $2}'); do
      case " $modules " in *" $path "*) ;; *) modules="$modules $path" ;; esac
    done
  done
  for path in $modules; do
    mkdir -p "$work$(dirname "$path")"
    cp "$path" "$work$path"
  done
  cat > "$work/init" <<EOF
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
for module in $modules; do /bin/busybox insmod "\$module"; done
/bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose hostroot /lower
/bin/busybox mount -t tmpfs tmpfs /upper
/bin/busybox mkdir -p /upper/data /upper/work
/bin/busybox mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work /root
job=\$(/bin/busybox sed -n 's/.*quiverjob=\([^ ]*\).*/\1/p' /proc/cmdline)
/bin/busybox mkdir -p "/root\$job"
/bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L job "/root\$job"
/bin/busybox umount /proc /sys /dev
exec /bin/busybox switch_root /root /bin/bash "\$job/guest.sh"
EOF
  chmod +x "$work/init"
  (cd "$work" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd.partial"
  mv "$initrd.partial" "$initrd"
  rm -rf "$work"
fi

job=$(mktemp -d /tmp/quiver-rdma-job.XXXXXX)
trap 'rm -rf "$job"' EXIT
printf '%q ' "$@" > "$job/command"
cat > "$job/guest.sh" <<EOF
# PID 1 of the guest, run by the host's bash from the host's own root.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs tmpfs /dev/shm
ulimit -l unlimited
rc=125
report() { echo "\$rc" > "$job/rc"; sync; echo 0 > /proc/sys/kernel/printk; echo o > /proc/sysrq-trigger; sleep 5; }
modprobe virtio_net; modprobe rdma_rxe && modprobe ib_uverbs || { echo "rdma_vm: could not load rdma_rxe" >&2; report; }
ip link set lo up
ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0
rdma link add rxe0 type rxe netdev eth0
# The RoCE v2 GID of eth0's IPv4 address, once rxe0 has it. Read with the shell's own read:
# the table has hundreds of entries, and a process per file (grep) takes minutes on an
# emulated CPU.
for try in \$(seq 100); do
  for index in /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/*; do
    read -r type < "\$index" 2>/dev/null || continue
    [[ "\$type" == *v2* ]] || continue
    read -r gid < "/sys/class/infiniband/rxe0/ports/1/gids/\${index##*/}" 2>/dev/null || continue
    if [[ "\$gid" == 0000:0000:0000:0000:0000:ffff:* ]]; then
      export RXE_GID_INDEX=\${index##*/}
      break 2
    fi
  done
  sleep 0.1
done
export RXE_DEV=rxe0
cd "$(pwd)"
bash -c "\$(cat "$job/command")" < /dev/null && rc=0 || rc=\$?
report
EOF

accel=(-accel tcg,thread=multi -cpu max)
if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then accel=(-accel kvm -cpu host); fi
timeout --foreground -k 5 "$timeout" qemu-system-x86_64 "${accel[@]}" -m 3G -smp 2 \
  -nodefaults -no-user-config -display none -no-reboot -serial stdio -monitor none \
  -kernel "/boot/vmlinuz-$kernel" -initrd "$initrd" \
  -append "console=ttyS0 quiet loglevel=1 panic=-1 quiverjob=$job" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$job,mount_tag=job,security_model=none" \
  -nic user,model=virtio-net-pci < /dev/null || true
[ -s "$job/rc" ] || { echo "rdma_vm: the guest reported no exit status (boot failure or timeout)" >&2; exit 125; }
exit "$(cat "$job/rc")"
