/* SPDX-License-Identifier: BSD-3-Clause */
/* vector.h --- growable arrays.
 *
 * DEFINE_VECTOR (name, type) defines
 *
 *   struct name { type *v; size_t n, cap; };
 *
 * (zero-initialise it: { 0 } is an empty vector) and, for it:
 *
 *   int name_reserve (struct name *, size_t extra)
 *       room for at least extra more elements: 0, or -ENOMEM (the
 *       vector is unchanged).  Capacity doubles, starting at 16.
 *   int name_append (struct name *, type x)
 *       append a copy of x: 0, or -ENOMEM (unchanged).
 *   void name_reset (struct name *)
 *       free the storage; the vector is empty again.  It does not free
 *       what the elements point to.
 *
 * Ownership of v may be taken by the caller (then zero the struct).
 * No lock: a vector belongs to whoever holds it.
 */
#ifndef EXT4LAZY_VECTOR_H
#define EXT4LAZY_VECTOR_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define DEFINE_VECTOR(name, type)                                              \
  struct name                                                                  \
  {                                                                            \
    type *v;                                                                   \
    size_t n, cap;                                                             \
  };                                                                           \
                                                                               \
  __attribute__ ((__unused__)) static inline int name##_reserve (              \
      struct name *a, size_t extra)                                            \
  {                                                                            \
    size_t cap = a->cap ? a->cap : 16;                                         \
    type *p;                                                                   \
                                                                               \
    if (extra > SIZE_MAX / sizeof (type) - a->n)                               \
      return -ENOMEM;                                                          \
    if (a->n + extra <= a->cap)                                                \
      return 0;                                                                \
    while (cap < a->n + extra)                                                 \
      cap = cap > SIZE_MAX / sizeof (type) / 2 ? a->n + extra : 2 * cap;       \
    p = realloc (a->v, cap * sizeof (type));                                   \
    if (!p)                                                                    \
      return -ENOMEM;                                                          \
    a->v = p;                                                                  \
    a->cap = cap;                                                              \
    return 0;                                                                  \
  }                                                                            \
                                                                               \
  __attribute__ ((__unused__)) static inline int name##_append (               \
      struct name *a, type x)                                                  \
  {                                                                            \
    int r = name##_reserve (a, 1);                                             \
                                                                               \
    if (r == 0)                                                                \
      a->v[a->n++] = x;                                                        \
    return r;                                                                  \
  }                                                                            \
                                                                               \
  __attribute__ ((__unused__)) static inline void name##_reset (               \
      struct name *a)                                                          \
  {                                                                            \
    free (a->v);                                                               \
    a->v = NULL;                                                               \
    a->n = a->cap = 0;                                                         \
  }

#endif /* EXT4LAZY_VECTOR_H */
