#include "rpc/rpc_hub.h"

#include <algorithm>
#include <cstring>

#include "client/client.h"
#include "client/communicator.h"
#include "client/transfer.h"
#include "core/clock.h"
#include "core/log.h"

namespace nexar::rpc {
namespace {

// Responses and requests are collected in memory; this much is reserved up
// front from a declared length, the rest only as bytes actually arrive.
constexpr uint64_t kReserveCap = 64ull << 20;

unsigned long long ull(uint64_t v) {
  return static_cast<unsigned long long>(v);
}

}  // namespace

// ---- caller side ----------------------------------------------------------------

// Waits for a place in the window of calls in flight to one target.
class SlotWait : public Wait {
 public:
  SlotWait(RpcHub *hub, OpContext *op, uint64_t deadline_ns, uint32_t world, int32_t user_rank)
      : Wait(op->loop(), op, deadline_ns, user_rank), hub_(hub), world_(world) {}
  bool await_ready() {
    RpcHub::Window &w = hub_->windows_[world_];
    if (w.in_flight < kCallWindow && w.waiting.empty()) {
      ++w.in_flight;
      return true;
    }
    w.waiting.push_back(this);
    queued_ = true;
    return false;
  }
  bool await_suspend(std::coroutine_handle<> h) { return suspend(h); }
  Status await_resume() { return result(); }
  // A finished call handed its slot over to this one.
  void grant() {
    queued_ = false;
    finish(Status());
  }

 protected:
  void detach() override {
    if (!queued_) return;
    auto &q = hub_->windows_[world_].waiting;
    q.erase(std::remove(q.begin(), q.end(), this), q.end());
    queued_ = false;
  }
  std::string timeout_message() const override {
    return format(
        "nexar_rpc_call: %u calls to rank %d were in flight and none ended before the "
        "deadline",
        kCallWindow, peer_rank());
  }

 private:
  RpcHub *hub_;
  uint32_t world_;
  bool queued_ = false;
};

// Waits for the response to one request. Registered under its request id
// from construction until it ends or is destroyed.
class ResponseWait : public Wait {
 public:
  ResponseWait(RpcHub *hub, OpContext *op, uint64_t deadline_ns, uint64_t req_id, uint32_t world,
               int32_t user_rank, uint32_t fn_id, uint64_t comm_id, uint64_t timeout_ms)
      : Wait(op->loop(), op, deadline_ns, user_rank),
        hub_(hub),
        req_id_(req_id),
        world_(world),
        fn_id_(fn_id),
        comm_id_(comm_id),
        timeout_ms_(timeout_ms) {
    hub_->waiters_[req_id_] = this;
  }
  ~ResponseWait() override { unhook(); }
  bool await_ready() const { return finished(); }
  bool await_suspend(std::coroutine_handle<> h) { return suspend(h); }
  Status await_resume() { return result(); }

  // Ends the call with a failure reported by (or about) the target.
  void fail_with(nexar_status_t code, const std::string &why) {
    finish(error(code,
                 format("nexar_rpc_call fn %u on rank %d: %s", fn_id_, peer_rank(), why.c_str()),
                 peer_rank()));
  }

  uint32_t world() const { return world_; }
  uint64_t comm_id() const { return comm_id_; }
  uint32_t fn_id() const { return fn_id_; }
  std::vector<uint8_t> bytes;    // the response as it arrives
  ResponseSink *sink = nullptr;  // the frame streaming into bytes, if any

 protected:
  void detach() override { unhook(); }
  std::string timeout_message() const override {
    return format("nexar_rpc_call fn %u: rank %d did not respond within %llu ms", fn_id_,
                  peer_rank(), ull(timeout_ms_));
  }

 private:
  void unhook();

  RpcHub *hub_;
  uint64_t req_id_;
  uint32_t world_;
  uint32_t fn_id_;
  uint64_t comm_id_;
  uint64_t timeout_ms_;
  bool registered_ = true;
};

// Streams one response frame into its waiter, or drains it when nobody waits.
class ResponseSink : public MessageSink {
 public:
  ResponseSink(RpcHub *hub, ResponseWait *waiter, const wire::FrameHeader &h, uint32_t from)
      : hub_(hub), waiter_(waiter), h_(h), from_(from) {
    if (waiter_) {
      waiter_->sink = this;
      if (h_.check == 0)
        waiter_->bytes.reserve(static_cast<size_t>(std::min(h_.length, kReserveCap)));
    }
  }
  size_t write(const uint8_t *data, size_t len) override {
    if (!waiter_) return len;
    if (h_.check == 0) {
      waiter_->bytes.insert(waiter_->bytes.end(), data, data + len);
    } else {
      const size_t room = kMaxErrorMessage - std::min(kMaxErrorMessage, error_.size());
      error_.append(reinterpret_cast<const char *>(data), std::min(room, len));
    }
    return len;
  }
  void finish(bool ok) override {
    RpcHub *hub = hub_;
    ResponseWait *w = std::exchange(waiter_, nullptr);
    if (!w) {
      if (ok) {
        ++hub->dropped_;
        LOG_DEBUG("rpc: dropped the response to request %llu from rank %u: its call had ended",
                  ull(h_.tag), from_);
      }
      hub->drop_sink(this);
      return;
    }
    w->sink = nullptr;
    const auto code = static_cast<int32_t>(h_.check);
    if (!ok) {
      w->fail_with(NEXAR_ERR_PEER_FAILED, "the connection was lost while the response arrived");
    } else if (code == NEXAR_OK) {
      w->finish(Status());
    } else if (!is_known_error(code)) {
      LOG_WARN("rpc: rank %u answered request %llu with unknown status %d", from_, ull(h_.tag),
               code);
      w->fail_with(NEXAR_ERR_PROTOCOL, format("the response carries unknown status %d", code));
    } else {
      w->fail_with(code, error_);
    }
    hub->drop_sink(this);
  }
  void abandon() { waiter_ = nullptr; }

 private:
  RpcHub *hub_;
  ResponseWait *waiter_;
  wire::FrameHeader h_;
  uint32_t from_;
  std::string error_;
};

void ResponseWait::unhook() {
  if (registered_) {
    hub_->waiters_.erase(req_id_);
    registered_ = false;
  }
  // Ended while its response streams in: the rest is drained and dropped.
  if (sink) std::exchange(sink, nullptr)->abandon();
}

// ---- callee side ----------------------------------------------------------------

// Collects one request; credit is withheld while the peer's queue is full.
class RequestSink : public MessageSink {
 public:
  RequestSink(RpcHub *hub, uint32_t from, const wire::FrameHeader &h, QuicConnection *conn,
              int64_t stream_id)
      : hub_(hub), from_(from), h_(h), conn_(conn), stream_id_(stream_id) {
    data_.reserve(static_cast<size_t>(std::min(h_.length, kReserveCap)));
  }
  size_t write(const uint8_t *data, size_t len) override {
    data_.insert(data_.end(), data, data + len);
    RpcHub::PeerLoad &l = hub_->load_[from_];
    if (!l.over()) return len;
    l.credit.add(conn_, stream_id_, len);
    return 0;
  }
  void finish(bool ok) override {
    RpcHub *hub = hub_;
    if (ok)
      hub->dispatch(from_, h_, std::move(data_));
    else
      LOG_DEBUG("rpc: request %llu from rank %u was cut off with its connection", ull(h_.tag),
                from_);
    hub->drop_sink(this);
  }

 private:
  RpcHub *hub_;
  uint32_t from_;
  wire::FrameHeader h_;
  QuicConnection *conn_;
  int64_t stream_id_;
  std::vector<uint8_t> data_;
};

// One request on its way through its handler on the completion thread.
struct Job {
  RpcHub *hub;
  std::shared_ptr<RpcRegistry> registry;
  uint32_t from;        // world rank of the caller
  uint32_t src_rank;    // its rank in the communicator
  uint32_t serve_rank;  // this rank in the communicator
  wire::FrameHeader h;
  std::vector<uint8_t> request;

  static void run(void *user_data, const nexar_completion_t *) {
    std::unique_ptr<Job> job(static_cast<Job *>(user_data));
    const uint32_t fn_id = job->h.check;
    auto reply = std::make_shared<nexar_rpc_reply>();
    Status s;
    const bool found = job->registry->invoke(fn_id, [&](const RpcRegistry::Handler &hd) {
      nexar_status_t rc;
      try {
        rc = hd.fn(hd.user_data, job->src_rank, fn_id, job->request.data(), job->request.size(),
                   reply.get());
      } catch (...) {
        rc = NEXAR_ERR_INTERNAL;
        reply->error = "the handler threw an exception";
      }
      if (rc != NEXAR_OK)
        s = error(NEXAR_ERR_RPC_FAILED,
                  format("the handler on rank %u failed with status %d%s%s", job->serve_rank, rc,
                         reply->error.empty() ? "" : ": ", reply->error.c_str()));
    });
    if (!found)
      s = error(NEXAR_ERR_RPC_NOT_REGISTERED,
                format("rank %u has no handler for it (unregistered)", job->serve_rank));
    RpcHub *hub = job->hub;
    const uint32_t from = job->from;
    const wire::FrameHeader h = job->h;
    const uint64_t n = job->request.size();
    job.reset();  // the request's memory goes now, not after the reply is sent
    hub->client_.loop().post(
        [hub, from, h, s, reply, n] { hub->answer(from, h, s, std::move(reply->data), n); });
  }
};

// ---- RpcHub -----------------------------------------------------------------------

RpcHub::RpcHub(Client &client) : client_(client) {}

RpcHub &RpcHub::of(Client &client) {
  // Every client that serves communicators is made by make_client, which
  // installs an RpcHub as its lanes.
  return static_cast<RpcHub &>(*client.rpc_lanes());
}

void RpcHub::add_stats(nexar_stats_t *out) const {
  out->rpc_requests_served = served_;
  out->rpc_responses_dropped = dropped_;
}

RpcHub::~RpcHub() {
  for (auto &[id, w] : waiters_)
    if (w->sink) w->sink->abandon();
}

std::shared_ptr<RpcRegistry> RpcHub::registry(const Communicator *comm, bool create) {
  std::lock_guard<std::mutex> g(registries_mu_);
  auto it = registries_.find(comm);
  if (it != registries_.end()) return it->second;
  if (!create) return nullptr;
  auto r = std::make_shared<RpcRegistry>();
  registries_.emplace(comm, r);
  return r;
}

void RpcHub::drop_comm(const Communicator *comm) {
  std::lock_guard<std::mutex> g(registries_mu_);
  registries_.erase(comm);
}

void RpcHub::drop_sink(MessageSink *s) {
  sinks_.erase(s);
}

void RpcHub::release_slot(uint32_t world_rank) {
  Window &w = windows_[world_rank];
  if (!w.waiting.empty()) {
    SlotWait *next = w.waiting.front();
    w.waiting.pop_front();
    next->grant();  // the slot passes on; in_flight stays
    return;
  }
  if (w.in_flight > 0) --w.in_flight;
  if (w.in_flight == 0) windows_.erase(world_rank);
}

Task<Status> RpcHub::call(Communicator *comm, OpContext *op, uint32_t target, uint32_t fn_id,
                          const void *request, uint64_t request_len, nexar_rpc_response **out) {
  const uint64_t timeout_ms = comm->config().rpc_timeout_ms;
  const uint64_t deadline = now_ns() + timeout_ms * kNsPerMs;
  const uint32_t world = comm->world_rank_of(target);
  const auto user_rank = static_cast<int32_t>(target);
  const bool local = target == comm->rank();

  struct SlotGuard {
    RpcHub *hub;
    uint32_t world;
    bool held = false;
    ~SlotGuard() {
      if (held) hub->release_slot(world);
    }
  } slot{this, world};
  if (!local) {
    SlotWait wait_slot(this, op, deadline, world, user_rank);
    Status s = co_await wait_slot;
    if (!s) co_return s;
    slot.held = true;
  }

  wire::FrameHeader h;
  h.kind = wire::FrameKind::RpcRequest;
  h.comm_id = comm->comm_id();
  h.tag = next_req_id_++;
  h.length = request_len;
  h.check = fn_id;
  // Registered before the request leaves: the response may come back before
  // the send is acknowledged.
  ResponseWait response(this, op, deadline, h.tag, world, user_rank, fn_id, h.comm_id, timeout_ms);
  if (local) {
    const auto *p = static_cast<const uint8_t *>(request);
    dispatch(world, h, std::vector<uint8_t>(p, p + request_len));
  } else {
    Status s = co_await SendWait(client_, op, deadline, world, user_rank, h, request,
                                 "nexar_rpc_call", SendCompletion::Copied);
    if (!s) co_return s;
  }
  Status s = co_await response;
  if (!s) co_return s;
  auto r = std::make_unique<nexar_rpc_response>();
  r->bytes = std::move(response.bytes);
  *out = r.release();
  co_return Status();
}

MessageSink *RpcHub::on_request(uint32_t from, QuicConnection *c, int64_t stream_id,
                                const wire::FrameHeader &h) {
  auto sink = std::make_unique<RequestSink>(this, from, h, c, stream_id);
  MessageSink *raw = sink.get();
  sinks_.emplace(raw, std::move(sink));
  return raw;
}

MessageSink *RpcHub::on_response(uint32_t from, const wire::FrameHeader &h) {
  ResponseWait *w = nullptr;
  auto it = waiters_.find(h.tag);
  if (it == waiters_.end()) {
    if (h.tag >= next_req_id_)
      LOG_WARN(
          "rpc: rank %u sent a response to request %llu, which this rank never made; "
          "dropped",
          from, ull(h.tag));
  } else if (it->second->world() != from || it->second->comm_id() != h.comm_id) {
    LOG_WARN(
        "rpc: rank %u sent a response to request %llu, which went to rank %u on another "
        "communicator or rank; dropped",
        from, ull(h.tag), it->second->world());
  } else if (it->second->sink || it->second->finished()) {
    LOG_WARN("rpc: rank %u answered request %llu twice; the second response is dropped", from,
             ull(h.tag));
  } else {
    w = it->second;
  }
  auto sink = std::make_unique<ResponseSink>(this, w, h, from);
  MessageSink *raw = sink.get();
  sinks_.emplace(raw, std::move(sink));
  return raw;
}

void RpcHub::dispatch(uint32_t from, const wire::FrameHeader &h, std::vector<uint8_t> request) {
  PeerLoad &l = load_[from];
  ++l.queued;
  l.queued_bytes += request.size();
  const uint64_t n = request.size();
  const uint32_t fn_id = h.check;
  const uint32_t me = client_.identity().rank;
  Communicator *comm = client_.comms().by_id(h.comm_id);
  const int32_t src = comm ? comm->rank_of_world(from) : -1;
  if (l.queued > kServeMaxQueued) {
    LOG_WARN("rpc: rank %u has %u requests queued from rank %u; refusing request %llu (fn %u)", me,
             l.queued - 1, from, ull(h.tag), fn_id);
    answer(from, h,
           error(NEXAR_ERR_NO_MEMORY,
                 format("rank %u refused it: %u requests from this rank were queued", me,
                        l.queued - 1)),
           PooledBuf(), n);
    return;
  }
  if (!comm || src < 0) {
    answer(
        from, h,
        error(NEXAR_ERR_RPC_NOT_REGISTERED,
              format("world rank %u has no such communicator (not created yet, or destroyed)", me)),
        PooledBuf(), n);
    return;
  }
  std::shared_ptr<RpcRegistry> reg = registry(comm, false);
  if (!reg || !reg->has(fn_id)) {
    answer(from, h,
           error(NEXAR_ERR_RPC_NOT_REGISTERED,
                 format("rank %u has no handler registered for it", comm->rank())),
           PooledBuf(), n);
    return;
  }
  auto job = std::make_unique<Job>(Job{this, std::move(reg), from, static_cast<uint32_t>(src),
                                       comm->rank(), h, std::move(request)});
  if (!comm->post_callback(&Job::run, job.get())) {
    answer(from, h,
           error(NEXAR_ERR_CLOSED,
                 format("rank %u's communicator was aborted or is closing", comm->rank())),
           PooledBuf(), n);
    return;
  }
  job.release();  // Job::run owns it now
}

void RpcHub::answer(uint32_t from, const wire::FrameHeader &h, Status s, PooledBuf reply,
                    uint64_t request_bytes) {
  ++served_;
  auto lit = load_.find(from);
  if (lit != load_.end()) {
    PeerLoad &l = lit->second;
    --l.queued;
    l.queued_bytes -= request_bytes;
    if (!l.over()) l.credit.release();
    if (l.queued == 0 && l.credit.empty()) load_.erase(lit);
  }

  if (from == client_.identity().rank) {  // a call to ourselves
    auto it = waiters_.find(h.tag);
    if (it == waiters_.end()) {
      ++dropped_;
      return;
    }
    ResponseWait *w = it->second;
    if (!s.ok()) {
      w->fail_with(s.code, s.message);
    } else {
      w->bytes.assign(reply.data(), reply.data() + reply.size());
      w->finish(Status());
    }
    return;
  }

  OutgoingMessage msg;
  msg.header.kind = wire::FrameKind::RpcResponse;
  msg.header.comm_id = h.comm_id;
  msg.header.tag = h.tag;
  msg.header.check = static_cast<uint32_t>(s.code);
  if (s.ok()) {
    msg.owned = std::move(reply);
  } else {
    const size_t len = std::min(s.message.size(), kMaxErrorMessage);
    msg.owned = PooledBuf::unpooled(len);
    if (len) memcpy(msg.owned.data(), s.message.data(), len);
  }
  msg.header.length = msg.owned.size();
  msg.payload = msg.owned.data();
  if (!client_.peer(from).send_owned(std::move(msg), 0))
    LOG_DEBUG("rpc: the response to request %llu of rank %u is dropped: no connection", ull(h.tag),
              from);
}

void RpcHub::fail_peer(uint32_t world_rank, const Status &s) {
  std::vector<ResponseWait *> victims;
  for (auto &[id, w] : waiters_)
    if (w->world() == world_rank) victims.push_back(w);
  for (ResponseWait *w : victims)
    w->fail_with(s.code == NEXAR_ERR_CLOSED ? NEXAR_ERR_PEER_FAILED : s.code, s.message);
}

void RpcHub::forget_connection(const QuicConnection *c) {
  for (auto &[rank, l] : load_)
    l.credit.forget(c);
}

}  // namespace nexar::rpc
