/* SPDX-License-Identifier: BSD-3-Clause */
/* criterion/logging.h for the ThreadSanitizer build: cr_log_info and the
 * rest are in crlite.h.
 */
#include "../../crlite.h"
