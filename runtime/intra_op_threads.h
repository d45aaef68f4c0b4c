// The CPU threads of the calling thread's own parallel loops (at::parallel_for), for runtime
// threads that run beside others: OpenMP gives every thread that enters a parallel loop a
// team of all the cores, so eight CPU samplers at once ran 128 spinning threads on 16 cores.
// Only this thread's setting changes (at::set_num_threads would change every thread's).
#pragma once

#include <ATen/Parallel.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace quiver::runtime {

inline void limit_intra_op_threads(int threads) {
#ifdef _OPENMP
  // Each thread's first parallel loop sets its count to the process's, once, by a flag kept
  // per thread and per library: libtorch's (reached by at::get_num_threads) and this
  // library's copy of the inline one (its own parallel loops). Both first, then the limit.
  (void)at::get_num_threads();
  at::internal::lazy_init_num_threads();
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}

}  // namespace quiver::runtime
