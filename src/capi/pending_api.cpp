// Entry points of the contract whose implementation has not landed yet. They
// link, validate nothing, and fail honestly with NEXAR_ERR_UNSUPPORTED (the
// callback is never invoked, as for every rejected call).
#include "capi/handles.h"

using nexar::capi::fail;

#define NEXAR_NOT_YET(name) \
  fail(NEXAR_ERR_UNSUPPORTED, #name " is not implemented in this build of nexar yet")

extern "C" {

NEXAR_API nexar_status_t nexar_comm_join(nexar_comm_t **, const nexar_comm_options_t *) {
  return NEXAR_NOT_YET(nexar_comm_join);
}
NEXAR_API nexar_status_t nexar_comm_init_from_env(nexar_comm_t **) {
  return NEXAR_NOT_YET(nexar_comm_init_from_env);
}

}  // extern "C"
