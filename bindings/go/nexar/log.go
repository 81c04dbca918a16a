package nexar

/*
#include "shim.h"
*/
import "C"

import (
	"os"
	"sync"
	"sync/atomic"
)

// LogLevel is the level of one of nexar's log lines (NEXAR_LOG_*).
type LogLevel int

// The levels, from the most severe.
const (
	LogError LogLevel = C.NEXAR_LOG_ERROR
	LogWarn  LogLevel = C.NEXAR_LOG_WARN
	LogInfo  LogLevel = C.NEXAR_LOG_INFO
	LogDebug LogLevel = C.NEXAR_LOG_DEBUG
	LogTrace LogLevel = C.NEXAR_LOG_TRACE
)

// String is the level as nexar writes it in its lines ("warn", ...).
func (l LogLevel) String() string {
	switch {
	case l <= LogError:
		return "error"
	case l == LogWarn:
		return "warn"
	case l == LogInfo:
		return "info"
	case l == LogDebug:
		return "debug"
	default:
		return "trace"
	}
}

var (
	logMu      sync.Mutex                             // serializes SetLogHandler
	logHandler atomic.Pointer[func(LogLevel, string)] // what goNexarLog calls
)

// SetLogHandler sends nexar's log lines (those NEXAR_LOG_LEVEL enables, warn
// by default) to handler instead of stderr, process-wide, replacing any
// earlier handler; nil restores stderr. line is what nexar would print
// ("nexar[host:pid:rRANK] warn: ..."), without the newline, e.g. for
// log/slog:
//
//	nexar.SetLogHandler(func(l nexar.LogLevel, line string) { slog.Warn(line, "level", l) })
//
// handler runs on nexar's threads, the I/O thread included, one call at a
// time: it must return quickly and must not block or wait for a nexar
// operation (hand the line on and return). A panic in it is recovered and
// the line dropped. Once SetLogHandler returns, the handler it replaced is
// not running and is never called again. From inside a handler it fails
// with ErrWouldDeadlock.
func SetLogHandler(handler func(level LogLevel, line string)) error {
	const op = "set_log_handler"
	if C.gx_in_log_callback() != 0 {
		return newError(op, -1, ErrWouldDeadlock, -1,
			"set_log_handler: called from inside the log handler, which it would wait for")
	}
	logMu.Lock()
	defer logMu.Unlock()
	previous := logHandler.Load()
	// A new handler is in place before nexar calls Go; nexar's call returns
	// once a call running with the previous one has ended (for a handler
	// replacing another, the same C trampoline is registered again for that).
	enable := C.int(0)
	if handler != nil {
		enable = 1
		logHandler.Store(&handler)
	}
	e := newErr()
	if err := takeErr(op, -1, C.gx_set_log(enable, &e), &e); err != nil {
		logHandler.Store(previous)
		return err
	}
	if handler == nil {
		logHandler.Store(nil)
	}
	return nil
}

// goNexarLog runs the Go log handler for one line, on the nexar thread that
// logged it (through gx_log in shim.c). Nothing may unwind into C.
//
//export goNexarLog
func goNexarLog(level C.int32_t, line *C.char) {
	defer func() { _ = recover() }()
	text := C.GoString(line)
	if h := logHandler.Load(); h != nil {
		(*h)(LogLevel(level), text)
		return
	}
	// Not reached while the registration and logHandler agree; never lose a line.
	_, _ = os.Stderr.WriteString(text + "\n")
}
