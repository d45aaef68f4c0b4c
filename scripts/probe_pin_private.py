"""Does pinning a MAP_PRIVATE file mapping (torch.from_file(shared=False)) copy its pages?

    python scripts/probe_pin_private.py     # every case, each in a child process; writes
                                            # 512 MiB to /dev/shm and needs a CUDA GPU
"""
import ctypes, os, subprocess, sys, json
import torch

def mapping_stats(path):
    stats, inside = {}, False
    for line in open("/proc/self/smaps"):
        if line[0] in "0123456789abcdef" and "-" in line.split()[0]:
            inside = line.rstrip().endswith(path)
            continue
        if inside and ":" in line:
            k, v = line.split(":", 1)
            if k in ("Rss", "Private_Dirty", "Shared_Clean", "Anonymous", "Private_Clean"):
                stats[k] = stats.get(k, 0) + int(v.split()[0]) // 1024
    return stats

def case(shared, flags):
    path = "/dev/shm/quiver-probe.bin"
    n = (512 << 20) // 4
    t = torch.from_file(path, shared=shared, size=n, dtype=torch.float32)
    t.sum()  # fault the pages in
    before = mapping_stats(path)
    cudart = torch.cuda.cudart()
    err = cudart.cudaHostRegister(t.data_ptr(), t.nbytes, flags)
    after = mapping_stats(path)
    gpu_ok = None
    if int(err) == 0:
        gpu_ok = bool((t[:1000].cuda().cpu() == t[:1000]).all())
        cudart.cudaHostUnregister(t.data_ptr())
    print(json.dumps({"shared": shared, "flags": flags, "err": int(err), "before_MiB": before, "after_MiB": after, "gpu_ok": gpu_ok}), flush=True)

if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    if len(sys.argv) > 1:
        if len(sys.argv) != 3 or sys.argv[1] not in ("shared", "private") \
                or not sys.argv[2].isdigit():
            sys.exit(__doc__)  # the two arguments are the children's
        case(sys.argv[1] == "shared", int(sys.argv[2]))
        sys.exit(0)
    if not torch.cuda.is_available():
        sys.exit("probe_pin_private.py pins host memory for a CUDA GPU, and torch sees none")
    torch.cuda.init()
    lib = ctypes.CDLL("libcudart.so.13")
    value = ctypes.c_int(-1)
    rc = lib.cudaDeviceGetAttribute(ctypes.byref(value), 113, 0)  # cudaDevAttrHostRegisterReadOnlySupported
    print("HostRegisterReadOnlySupported", rc, value.value)
    value2 = ctypes.c_int(-1)
    rc = lib.cudaDeviceGetAttribute(ctypes.byref(value2), 100, 0)  # cudaDevAttrPageableMemoryAccessUsesHostPageTables
    print("PageableMemoryAccessUsesHostPageTables", rc, value2.value)
    torch.arange((512 << 20) // 4, dtype=torch.float32).numpy().tofile("/dev/shm/quiver-probe.bin")
    for shared, flags in (("shared", 3), ("private", 3), ("private", 3 | 8)):
        subprocess.run([sys.executable, __file__, shared, str(flags)])
    os.unlink("/dev/shm/quiver-probe.bin")
