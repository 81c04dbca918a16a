// The dispatcher: completions and log lines, handed from nexar's threads to
// Python on the "nexar-dispatch" thread (nexar/__init__.py).
#pragma once

#include <nexar.h>

#include <cstdint>

namespace nexar_py {

// The C completion callback: user_data is a new std::shared_ptr<Pending>,
// which it takes. nexar's completion thread, no Python.
void on_done(void *user_data, const nexar_completion_t *c);

// The C log callback: any nexar thread, no Python.
void on_log(void *, int32_t level, const char *line);

// The "nexar-dispatch" Python thread's body; returns once dispatch_stop() was
// called and the queues are empty.
void dispatch_loop();
void dispatch_stop();
// In a child just forked: a new dispatcher, for a new dispatch thread.
void dispatch_after_fork_in_child();

// Waits (GIL released) until everything queued so far was handed to Python.
bool dispatch_flush(double timeout_s);

}  // namespace nexar_py
