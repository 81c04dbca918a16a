/* A C99 program linked against libnexar.so: versions agree, strings exist,
 * the thread's last error reads back. */
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
  {
    /* The thread's last error: none yet, then the failure of a refused call. */
    nexar_completion_t info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (nexar_last_error(&info) != NEXAR_OK || info.status != NEXAR_OK || info.failed_rank != -1 ||
        info.message == NULL || info.message[0] != '\0')
      return 6;
    if (nexar_comm_abort(NULL) != NEXAR_ERR_INVALID_ARGUMENT) return 7;
    if (nexar_last_error(&info) != NEXAR_OK || info.status != NEXAR_ERR_INVALID_ARGUMENT ||
        strcmp(info.message, nexar_last_error_message()) != 0)
      return 8;
    if (nexar_last_error(NULL) != NEXAR_ERR_INVALID_ARGUMENT) return 9;
  }
  return nexar_c99_check();
}
