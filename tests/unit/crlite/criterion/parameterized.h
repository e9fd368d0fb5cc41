/* SPDX-License-Identifier: BSD-3-Clause */
/* criterion/parameterized.h for the ThreadSanitizer build: crlite.h has
 * ParameterizedTest (see there).
 */
#include "../../crlite.h"
