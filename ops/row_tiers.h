// Limits of a tiered row layout, torch-free: shared by the op checks, the CPU and CUDA
// gather kernels and the FeatureTiers runtime class.
#pragma once

namespace quiver {

// GPU shards of one NVLink clique plus the host tier, with room for large NVSwitch systems.
constexpr int kMaxRowTiers = 17;

}  // namespace quiver
