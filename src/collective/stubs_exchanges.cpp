// Placeholders until the data-movement collectives land (delete this file then).
#include "collective/collectives.h"

namespace nexar {
namespace {
Task<Status> not_yet(Coll &c) {
  co_return error(NEXAR_ERR_UNSUPPORTED, format("%s is not implemented yet", c.what()));
}
}  // namespace
Task<Status> alltoall(Coll &c) {
  return not_yet(c);
}
Task<Status> gather(Coll &c) {
  return not_yet(c);
}
Task<Status> scatter(Coll &c) {
  return not_yet(c);
}
Task<Status> scan(Coll &c) {
  return not_yet(c);
}
Task<Status> exscan(Coll &c) {
  return not_yet(c);
}
}  // namespace nexar
