// Ctrl-C during the library's waits. A wait for a peer, the rendezvous store or a collective
// can last its whole timeout (a minute by default), and Python runs its SIGINT handler only
// once the call returns: Ctrl-C did nothing until then. So while the library waits, SIGINT
// is counted too: a handler of ours runs the process's own one first (Python's marks the
// signal for the interpreter) and then counts. A wait looks at the count between slices of
// at most kInterruptSlice and ends as its timeout would, raising Interrupted; the Python
// package then lets Python's handler run (KeyboardInterrupt, by default). A wait ended so
// may leave its hosts out of step (a transport then refuses further use, as after a
// timeout), so a wait gives in to SIGINT only once it has lasted kInterruptGrace: one that
// was about to end anyway ends, and Python's handler runs just after, with nothing broken.
//
// Only the main thread's waits end so (Python runs its handlers there): a loader's builder,
// an endpoint's connection threads and a fetch on a side thread wait on, and are stopped
// by what the main thread does next. Nothing is installed where SIGINT is ignored or left
// to its default (which ends the process): a C++ program that sets no handler is killed by
// Ctrl-C as before. A SIGINT that came before a wait began is Python's to handle once the
// call returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace quiver::runtime {

// How long a wait may go without looking for a Ctrl-C.
constexpr std::chrono::milliseconds kInterruptSlice{50};
// How long a wait lasts before a Ctrl-C ends it.
constexpr std::chrono::milliseconds kInterruptGrace{500};

// The text every interrupted wait's error starts with.
constexpr const char* kInterruptedText = "interrupted by SIGINT (Ctrl-C)";

// A wait that ended on SIGINT: "interrupted by SIGINT (Ctrl-C) while waiting for <what>".
class Interrupted : public std::runtime_error {
 public:
  explicit Interrupted(const std::string& waiting_for);
};

// Made as a wait begins: counts the SIGINTs that come after (on the main thread; elsewhere
// it never reports one).
class InterruptWatch {
 public:
  InterruptWatch();

  // Whether a SIGINT came since this watch was made, and the watch is kInterruptGrace old.
  bool interrupted() const;

  // Whether this watch can report a SIGINT at all (it was made on the main thread): a wait
  // cut into slices only to look for one need not be, otherwise.
  bool armed() const { return armed_; }

  // Raises Interrupted naming what was waited for, once a SIGINT came.
  void check(const std::string& waiting_for) const {
    if (interrupted()) throw Interrupted(waiting_for);
  }

 private:
  bool armed_;
  uint64_t seen_ = 0;
  std::chrono::steady_clock::time_point made_;
};

}  // namespace quiver::runtime
