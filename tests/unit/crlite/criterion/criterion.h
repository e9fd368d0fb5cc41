/* SPDX-License-Identifier: BSD-3-Clause */
/* criterion/criterion.h for the ThreadSanitizer build: the unit tests'
 * #include <criterion/criterion.h> finds crlite.h through it (see there).
 */
#include "../../crlite.h"
