/* SPDX-License-Identifier: BSD-3-Clause */
/* crlite.h --- a small stand-in for the part of Criterion that the unit
 * tests use, for the ThreadSanitizer build only.
 *
 * Criterion's runner cannot start under TSan: BoxFort maps its
 * inheritable arena at an address inside the range TSan keeps for its
 * shadow memory ("Could not initialize inheritable arena").  With
 * -Db_sanitize=thread, tests/unit/meson.build builds the tests that use
 * nothing beyond what is here against crlite.c instead, through
 * crlite/criterion/criterion.h, so the sources keep their
 * #include <criterion/criterion.h>.
 *
 * What it keeps of Criterion: Test and TestSuite with .init, .fini,
 * .timeout, .disabled and .description (the suite's .init runs before
 * the test's, the test's .fini before the suite's); each test in a
 * forked child of its own, so globals start fresh; a cr_assert that
 * fails ends the test and runs the .fini, a cr_expect marks it failed
 * and goes on; cr_skip_test ends the child without .fini.  Each macro
 * takes an optional printf-style message after its operands.  A
 * ParameterizedTest runs once per element of its ParameterizedTestParameters'
 * array, each in a child of its own, named "suite::name[i]".  Tests run
 * one at a time, in order of suite and name.
 */
#ifndef EXT4LAZY_CRLITE_H
#define EXT4LAZY_CRLITE_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

struct crl_data
{
  int sentinel; /* set by the macros, so that "{ .s = 1, }" is never empty */
  void (*init) (void);
  void (*fini) (void);
  double timeout; /* seconds, 0 for none */
  bool disabled;
  const char *description;
};

struct crl_suite
{
  const char *name;
  struct crl_data data;
  struct crl_suite *next;
};

/* What a ParameterizedTestParameters function returns: LENGTH elements
 * of SIZE bytes at PARAMS.
 */
struct criterion_test_params
{
  size_t size;
  void *params;
  size_t length;
};

struct crl_test
{
  const char *suite, *name;
  void (*fn) (void); /* NULL for a parameterized test */
  struct crl_data data;
  struct crl_test *next;
  struct criterion_test_params (*params) (void);
  void (*pfn) (void *param);
};

extern void crl_register_suite (struct crl_suite *s);
extern void crl_register_test (struct crl_test *t);
/* Report a failed check; FMT starts with one character to drop (see
 * CRL_CHECK).  crl_abort_test then ends the test, as cr_assert does.
 */
extern void crl_fail (const char *file, int line, const char *expr,
                      const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));
extern void crl_abort_test (void) __attribute__ ((noreturn));
extern void crl_skip (const char *fmt, ...)
    __attribute__ ((format (printf, 1, 2), noreturn));
extern void crl_log (const char *tag, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

#define Test(Suite, Name, ...)                                                 \
  static void crl_fn_##Suite##_##Name (void);                                  \
  static struct crl_test crl_test_##Suite##_##Name                             \
      = { #Suite,                                                              \
          #Name,                                                               \
          crl_fn_##Suite##_##Name,                                             \
          { .sentinel = 1, __VA_ARGS__ },                                      \
          NULL,                                                                \
          NULL,                                                                \
          NULL };                                                              \
  __attribute__ ((constructor)) static void crl_reg_##Suite##_##Name (void)    \
  {                                                                            \
    crl_register_test (&crl_test_##Suite##_##Name);                            \
  }                                                                            \
  static void crl_fn_##Suite##_##Name (void)

#define ParameterizedTestParameters(Suite, Name)                               \
  static struct criterion_test_params crl_params_##Suite##_##Name (void)

#define ParameterizedTest(Param, Suite, Name, ...)                             \
  static struct criterion_test_params crl_params_##Suite##_##Name (void);      \
  static void crl_pfn_##Suite##_##Name (Param);                                \
  static void crl_thunk_##Suite##_##Name (void *p)                             \
  {                                                                            \
    crl_pfn_##Suite##_##Name (p);                                              \
  }                                                                            \
  static struct crl_test crl_test_##Suite##_##Name                             \
      = { #Suite,                                                              \
          #Name,                                                               \
          NULL,                                                                \
          { .sentinel = 1, __VA_ARGS__ },                                      \
          NULL,                                                                \
          crl_params_##Suite##_##Name,                                         \
          crl_thunk_##Suite##_##Name };                                        \
  __attribute__ ((constructor)) static void crl_reg_##Suite##_##Name (void)    \
  {                                                                            \
    crl_register_test (&crl_test_##Suite##_##Name);                            \
  }                                                                            \
  static void crl_pfn_##Suite##_##Name (Param)

#define cr_make_param_array(Type, Array, Len)                                  \
  ((struct criterion_test_params){ sizeof (Type), (void *)(Array), (Len) })

/* Ends with a declaration, for the ";" that follows it in the tests. */
#define TestSuite(Suite, ...)                                                  \
  static struct crl_suite crl_suite_##Suite;                                   \
  __attribute__ ((constructor)) static void crl_sreg_##Suite (void)            \
  {                                                                            \
    crl_register_suite (&crl_suite_##Suite);                                   \
  }                                                                            \
  static struct crl_suite crl_suite_##Suite                                    \
      = { #Suite, { .sentinel = 1, __VA_ARGS__ }, NULL }

/* The message, if any, is pasted after a one-character string, as
 * Criterion does, so that an assertion without one is no empty format.
 */
#define CRL_CHECK(Fatal, Cond, Expr, ...)                                      \
  do                                                                           \
    {                                                                          \
      if (!(Cond))                                                             \
        {                                                                      \
          crl_fail (__FILE__, __LINE__, Expr, "x" __VA_ARGS__);                \
          if (Fatal)                                                           \
            crl_abort_test ();                                                 \
        }                                                                      \
    }                                                                          \
  while (0)
#define CRL_CMP(Fatal, A, Op, B, ...)                                          \
  CRL_CHECK (Fatal, (A)Op (B), #A " " #Op " " #B, __VA_ARGS__)
#define CRL_STRCMP(Fatal, A, Op, B, ...)                                       \
  CRL_CHECK (Fatal, strcmp ((A), (B)) Op 0,                                    \
             "strcmp (" #A ", " #B ") " #Op " 0", __VA_ARGS__)
#define CRL_FLOAT_EQ(Fatal, A, B, Eps, ...)                                    \
  CRL_CHECK (Fatal, (A) - (B) <= (Eps) && (B) - (A) <= (Eps),                  \
             #A " == " #B " within " #Eps, __VA_ARGS__)

#define cr_assert(Cond, ...) CRL_CHECK (true, Cond, #Cond, __VA_ARGS__)
#define cr_assert_not(Cond, ...)                                               \
  CRL_CHECK (true, !(Cond), "!" #Cond, __VA_ARGS__)
#define cr_assert_fail(...) CRL_CHECK (true, false, "", __VA_ARGS__)
#define cr_assert_eq(A, B, ...) CRL_CMP (true, A, ==, B, __VA_ARGS__)
#define cr_assert_neq(A, B, ...) CRL_CMP (true, A, !=, B, __VA_ARGS__)
#define cr_assert_lt(A, B, ...) CRL_CMP (true, A, <, B, __VA_ARGS__)
#define cr_assert_leq(A, B, ...) CRL_CMP (true, A, <=, B, __VA_ARGS__)
#define cr_assert_gt(A, B, ...) CRL_CMP (true, A, >, B, __VA_ARGS__)
#define cr_assert_geq(A, B, ...) CRL_CMP (true, A, >=, B, __VA_ARGS__)
#define cr_assert_null(P, ...) CRL_CMP (true, P, ==, NULL, __VA_ARGS__)
#define cr_assert_not_null(P, ...) CRL_CMP (true, P, !=, NULL, __VA_ARGS__)
#define cr_assert_str_eq(A, B, ...) CRL_STRCMP (true, A, ==, B, __VA_ARGS__)
#define cr_assert_str_neq(A, B, ...) CRL_STRCMP (true, A, !=, B, __VA_ARGS__)
#define cr_assert_str_empty(S, ...)                                            \
  CRL_CHECK (true, (S)[0] == '\0', #S " is empty", __VA_ARGS__)
#define cr_assert_float_eq(A, B, Eps, ...)                                     \
  CRL_FLOAT_EQ (true, A, B, Eps, __VA_ARGS__)

#define cr_expect(Cond, ...) CRL_CHECK (false, Cond, #Cond, __VA_ARGS__)
#define cr_expect_not(Cond, ...)                                               \
  CRL_CHECK (false, !(Cond), "!" #Cond, __VA_ARGS__)
#define cr_expect_fail(...) CRL_CHECK (false, false, "", __VA_ARGS__)
#define cr_expect_eq(A, B, ...) CRL_CMP (false, A, ==, B, __VA_ARGS__)
#define cr_expect_neq(A, B, ...) CRL_CMP (false, A, !=, B, __VA_ARGS__)
#define cr_expect_lt(A, B, ...) CRL_CMP (false, A, <, B, __VA_ARGS__)
#define cr_expect_leq(A, B, ...) CRL_CMP (false, A, <=, B, __VA_ARGS__)
#define cr_expect_gt(A, B, ...) CRL_CMP (false, A, >, B, __VA_ARGS__)
#define cr_expect_geq(A, B, ...) CRL_CMP (false, A, >=, B, __VA_ARGS__)
#define cr_expect_null(P, ...) CRL_CMP (false, P, ==, NULL, __VA_ARGS__)
#define cr_expect_not_null(P, ...) CRL_CMP (false, P, !=, NULL, __VA_ARGS__)
#define cr_expect_str_eq(A, B, ...) CRL_STRCMP (false, A, ==, B, __VA_ARGS__)
#define cr_expect_str_neq(A, B, ...) CRL_STRCMP (false, A, !=, B, __VA_ARGS__)
#define cr_expect_str_empty(S, ...)                                            \
  CRL_CHECK (false, (S)[0] == '\0', #S " is empty", __VA_ARGS__)
#define cr_expect_float_eq(A, B, Eps, ...)                                     \
  CRL_FLOAT_EQ (false, A, B, Eps, __VA_ARGS__)

#define cr_skip_test(...) crl_skip ("x" __VA_ARGS__)
#define cr_log_info(...) crl_log ("----", __VA_ARGS__)
#define cr_log_warn(...) crl_log ("WARN", __VA_ARGS__)
#define cr_log_error(...) crl_log ("ERR ", __VA_ARGS__)

#endif /* EXT4LAZY_CRLITE_H */
