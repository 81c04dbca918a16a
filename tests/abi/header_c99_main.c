/* A C99 program linked against libnexar.so: versions agree, strings exist. */
#include <nexar.h>
#include <stdio.h>
#include <string.h>

int nexar_c99_check(void);

int main(void) {
  char expect[32];
  snprintf(expect, sizeof expect, "%d.%d.%d", NEXAR_VERSION_MAJOR, NEXAR_VERSION_MINOR,
           NEXAR_VERSION_PATCH);
  if (strcmp(nexar_version_string(), expect) != 0) return 2;
  if (nexar_version() != (uint32_t)NEXAR_VERSION_NUMBER) return 3;
  if (strncmp(nexar_status_str(NEXAR_ERR_TIMEOUT), "NEXAR_ERR_TIMEOUT", 17) != 0) return 4;
  if (nexar_dtype_size(NEXAR_DTYPE_BF16) != 2 || nexar_dtype_size(99) != 0) return 5;
  return nexar_c99_check();
}
