/* Compiled with -std=c99 -pedantic -Werror: the public header is strict C99. */
#include <nexar.h>

static void on_done(void *user_data, const nexar_completion_t *c) {
  (void)user_data;
  (void)c;
}

int nexar_c99_check(void) {
  nexar_comm_options_t opts;
  nexar_done_fn fn = on_done;
  (void)fn;
  if (nexar_comm_options_init(&opts, sizeof opts) != NEXAR_OK) return 1;
  return nexar_version() == NEXAR_VERSION_NUMBER ? 0 : 1;
}
