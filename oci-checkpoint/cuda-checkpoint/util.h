/* Messages: one line each, prefixed with the tool's name. */
#ifndef REKINDLE_UTIL_H
#define REKINDLE_UTIL_H

/* Prints an error line to stderr (and to the log, if any). */
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints an info line to stderr when -v was given, and appends it to
 * $REKINDLE_CUDA_CHECKPOINT_LOG if set: CRIU's plugin drops our output on
 * success, so the log is how tests and operators see what a restore did. */
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Seconds since the last call (the first call: since the program started),
 * on the monotonic clock: each driver step logs how long it took. */
double step_seconds(void);

extern int verbose;

#endif
