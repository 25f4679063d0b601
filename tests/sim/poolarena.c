/* The pool's placement and reserve, the same bookkeeping as the shim's
 * (core/poolarena.c, checked against the driver's own log by cpu test
 * pool-arena), kept internal to the sim: its exported names are the
 * driver's API and simcuda_*. The C library's headers come first, so that
 * only the bookkeeping's own names are hidden. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#pragma GCC visibility push(hidden)
#include "../../core/poolarena.c"
#pragma GCC visibility pop
