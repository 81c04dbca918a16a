// Placeholders until the reduction collectives land (delete this file then).
#include "collective/collectives.h"

namespace nexar {
namespace {
Task<Status> not_yet(Coll &c) {
  co_return error(NEXAR_ERR_UNSUPPORTED, format("%s is not implemented yet", c.what()));
}
}  // namespace
Task<Status> allreduce(Coll &c) {
  return not_yet(c);
}
Task<Status> reduce_scatter(Coll &c) {
  return not_yet(c);
}
Task<Status> allgather(Coll &c) {
  return not_yet(c);
}
Task<Status> reduce(Coll &c) {
  return not_yet(c);
}
Task<Status> broadcast(Coll &c) {
  return not_yet(c);
}
}  // namespace nexar
