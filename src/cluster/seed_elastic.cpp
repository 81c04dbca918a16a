// The elastic seed's part (seed.h): joiners wait in a bounded pending list;
// a grow collects one request from every member of the communicator, then
// welcomes the members (old ranks first, in order) and the oldest joiners
// into a grown world with a fresh world id. Once every participant reports
// its mesh formed, the seed tells them all (JoinAdmitted{n, n}); only then do
// they use the grown world, so that no participant is left in a world that
// failed to form. A member lost during a grow, also after others formed the
// mesh, fails it at every member alike and sends the joiners back to wait; a
// joiner lost (its connection to the seed closed, or a participant reports it
// unreachable) is dropped and the others are welcomed again without it.
#include <gnutls/crypto.h>

#include <algorithm>

#include "cluster/seed.h"
#include "core/clock.h"
#include "core/log.h"

namespace nexar {

void Seed::tell_pending() {
  const uint32_t n = static_cast<uint32_t>(count(Member::State::Pending));
  for (auto &m : members_)
    if (m->conn && m->state == Member::State::Ready) send(m->conn, wire::PendingJoins{n});
}

void Seed::admit_joiner(Member *m) {
  const size_t pending = count(Member::State::Pending);
  if (pending >= kMaxPending)
    return refuse(m, NEXAR_ERR_IO,
                  format("%zu joiners already wait to be admitted; try again later", pending));
  m->state = Member::State::Pending;
  m->since_ns = now_ns();
  const std::string what =
      format("joiner waiting to be admitted (%zu waiting): %s, listening on %s", pending + 1,
             m->describe().c_str(), m->req.advertise_address.c_str());
  LOG_INFO("%s", what.c_str());
  emit(NEXAR_SEED_EVENT_JOINED, -1, what);
  send(m->conn, wire::JoinAdmitted{static_cast<uint32_t>(pending + 1), 0});
  tell_pending();
}

Seed::Round *Seed::round_of(const Member *m) {
  if (m->round == 0) return nullptr;
  for (auto &r : rounds_)
    if (r->id == m->round) return r.get();
  return nullptr;
}

void Seed::handle_grow(Member *m, const wire::GrowRequest &req) {
  if (m->state != Member::State::Ready) {
    m->conn->close(1, error(NEXAR_ERR_PROTOCOL, "a GrowRequest from a worker that is no member"));
    return;
  }
  auto refuse_grow = [&](nexar_status_t code, const std::string &why) {
    LOG_WARN("grow request of %s refused: %s", m->describe().c_str(), why.c_str());
    send(m->conn, wire::JoinError{code, -1, why});
  };
  SocketAddress adv;
  if (req.size == 0 || req.size > kMaxWorld || req.rank >= req.size)
    return refuse_grow(NEXAR_ERR_INVALID_ARGUMENT,
                       format("rank %u of a communicator of %u is not valid", req.rank, req.size));
  if (!SocketAddress::parse_numeric(req.advertise_address, &adv))
    return refuse_grow(NEXAR_ERR_INVALID_ARGUMENT,
                       format("advertised address '%s' is not a numeric ip:port",
                              log::one_line(req.advertise_address).c_str()));
  Status s = ClusterCa::check_csr(req.csr_pem);
  if (!s) return refuse_grow(s.code, s.message);
  if (m->round != 0)
    return refuse_grow(NEXAR_ERR_INVALID_ARGUMENT, "this member already takes part in a grow");
  Round *r = nullptr;
  for (auto &o : rounds_)
    if (o->world_id == req.world_id && o->comm_id == req.comm_id && o->grow_seq == req.grow_seq)
      r = o.get();
  if (r && r->meshing)
    return refuse_grow(NEXAR_ERR_MISMATCH, "this grow of the communicator is already forming");
  if (!r) {
    auto fresh = std::make_unique<Round>();
    fresh->id = next_round_++;
    fresh->world_id = req.world_id;
    fresh->comm_id = req.comm_id;
    fresh->grow_seq = req.grow_seq;
    fresh->members.assign(req.size, nullptr);
    const uint64_t ms = std::clamp<uint64_t>(req.timeout_ms, 1000, join::kMaxFormationMs);
    fresh->started_ns = now_ns();
    fresh->deadline_ns = fresh->started_ns + ms * kNsPerMs;
    r = fresh.get();
    rounds_.push_back(std::move(fresh));
  }
  if (r->members.size() != req.size || r->members[req.rank]) {
    refuse_grow(NEXAR_ERR_MISMATCH, "the members disagree on the communicator being grown");
    return fail_round(r, NEXAR_ERR_MISMATCH, static_cast<int32_t>(req.rank),
                      format("rank %u asked to grow a communicator of %u ranks, another member "
                             "asked for rank %u of %zu",
                             req.rank, req.size, req.rank, r->members.size()));
  }
  m->req.advertise_address = req.advertise_address;
  m->req.csr_pem = req.csr_pem;
  m->rank = req.rank;
  m->round = r->id;
  r->members[req.rank] = m;
  r->max_new = std::min(r->max_new, req.max_new);
  if (++r->arrived == r->members.size()) start_round(r);
}

void Seed::start_round(Round *r) {
  const uint32_t n = static_cast<uint32_t>(r->members.size());
  const uint32_t cap = cfg_.max_world_size ? cfg_.max_world_size : kMaxWorld;
  const uint32_t room = cap > n ? cap - n : 0;
  const uint32_t k = std::min(r->max_new, room);
  std::vector<Member *> pending;
  for (auto &m : members_)
    if (m->conn && m->state == Member::State::Pending) pending.push_back(m.get());
  std::sort(pending.begin(), pending.end(),
            [](const Member *a, const Member *b) { return a->arrival < b->arrival; });
  if (pending.size() > k) pending.resize(k);
  for (Member *j : pending) {
    j->state = Member::State::Growing;
    j->round = r->id;
  }
  r->joiners = std::move(pending);
  welcome_round(r);
  tell_pending();
}

void Seed::welcome_round(Round *r) {
  r->meshing = true;
  r->ready = 0;
  uint64_t id = 0;
  while (id == 0 || id == cluster_id_)
    gnutls_rnd(GNUTLS_RND_NONCE, &id, sizeof id);
  r->new_world = id;
  std::vector<Member *> all = r->members;
  all.insert(all.end(), r->joiners.begin(), r->joiners.end());
  wire::Welcome w;
  w.world_size = static_cast<uint32_t>(all.size());
  w.cluster_id = id;
  w.ca_pem = ca_pem_;
  for (Member *m : all)
    w.peers.push_back(m->req.advertise_address);
  for (uint32_t rank = 0; rank < all.size(); ++rank) {
    X509Cert cert;
    Status s = ca_->issue_from_csr(rank, all[rank]->req.csr_pem, id, &cert);
    if (s) s = cert_to_pem(cert.get(), &w.cert_pem);
    if (!s)
      return fail_round(r, s.code, static_cast<int32_t>(rank),
                        format("cannot sign rank %u's certificate: %s", rank, s.message.c_str()));
    w.rank = rank;
    all[rank]->rank = rank;
    send(all[rank]->conn, w);
  }
  LOG_INFO("growing a world of %zu by %zu joiner(s) into world %016llx", r->members.size(),
           r->joiners.size(), static_cast<unsigned long long>(id));
}

void Seed::round_ready(Member *m, const wire::MeshReady &ready) {
  Round *r = round_of(m);
  if (!r || !r->meshing) {
    m->conn->close(1, error(NEXAR_ERR_PROTOCOL, "unexpected MeshReady during a grow"));
    return;
  }
  if (ready.world_id != r->new_world) {
    // Formed an earlier attempt of this grow, before this one's Welcome
    // reached it: its report for the new world will follow. Its rank may
    // differ in this attempt (a lost joiner before it was dropped).
    LOG_DEBUG("%s reports world %016llx, not this grow's %016llx: ignored", m->describe().c_str(),
              static_cast<unsigned long long>(ready.world_id),
              static_cast<unsigned long long>(r->new_world));
    return;
  }
  if (ready.rank != m->rank) {
    m->conn->close(1, error(NEXAR_ERR_PROTOCOL, "a MeshReady for another rank during a grow"));
    return;
  }
  ++r->ready;
  if (r->ready == r->members.size() + r->joiners.size()) end_round(r);
}

void Seed::round_mesh_failed(Round *r, Member *m, const wire::JoinError &report) {
  if (report.world_id != 0 && report.world_id != r->new_world) {
    // About an attempt already replaced (a lost joiner was dropped): this
    // participant was welcomed again since.
    LOG_DEBUG("%s reports a failure in world %016llx, not this grow's %016llx: ignored",
              m->describe().c_str(), static_cast<unsigned long long>(report.world_id),
              static_cast<unsigned long long>(r->new_world));
    return;
  }
  const std::string why = log::one_line(report.reason);
  // A joiner that a participant could not reach (it died, or its address
  // does not answer) is left out: the others are welcomed again without it.
  // Its own connection to the seed may take seconds more to time out.
  const size_t n = r->members.size();
  if (r->meshing && report.failed_rank >= 0 && static_cast<size_t>(report.failed_rank) >= n &&
      static_cast<size_t>(report.failed_rank) < n + r->joiners.size()) {
    Member *j = r->joiners[static_cast<size_t>(report.failed_rank) - n];
    if (j != m) {
      const std::string what = format(
          "joiner %s (rank %d of the grown world) was lost during a grow, reported by "
          "%s: %s",
          j->describe().c_str(), report.failed_rank, m->describe().c_str(), why.c_str());
      LOG_WARN("%s: not admitted", what.c_str());
      refuse(j, NEXAR_ERR_PEER_FAILED, what);
      return drop_joiner(r, j);
    }
  }
  fail_round(r, is_known_error(report.status) ? report.status : NEXAR_ERR_PROTOCOL, -1,
             format("%s could not form the grown mesh: %s", m->describe().c_str(), why.c_str()));
}

void Seed::drop_joiner(Round *r, Member *j) {
  j->round = 0;
  r->joiners.erase(std::find(r->joiners.begin(), r->joiners.end(), j));
  // Welcome the others again without it, under a new world id: those that
  // formed the grown mesh with it leave that world, and their reports of it
  // still in flight are told apart by the id (round_ready, round_mesh_failed).
  welcome_round(r);
}

void Seed::end_round(Round *r) {
  const uint32_t n = static_cast<uint32_t>(r->members.size() + r->joiners.size());
  for (Member *m : r->members) {
    m->round = 0;
    if (m->conn) send(m->conn, wire::JoinAdmitted{n, n});
  }
  for (Member *j : r->joiners) {
    j->round = 0;
    j->state = Member::State::Ready;  // a member from now on
    if (j->conn) send(j->conn, wire::JoinAdmitted{n, n});
  }
  const std::string what =
      format("grown: a world of %zu took in %zu joiner(s), now %zu ranks, in %.1f ms",
             r->members.size(), r->joiners.size(), r->members.size() + r->joiners.size(),
             static_cast<double>(now_ns() - r->started_ns) / 1e6);
  LOG_INFO("%s", what.c_str());
  emit(NEXAR_SEED_EVENT_GROWN, -1, what);
  rounds_.erase(std::remove_if(rounds_.begin(), rounds_.end(),
                               [r](const std::unique_ptr<Round> &o) { return o.get() == r; }),
                rounds_.end());
  tell_pending();
}

void Seed::fail_round(Round *r, nexar_status_t code, int32_t failed_rank,
                      const std::string &reason) {
  const std::string what = "grow failed: " + reason;
  LOG_WARN("%s", what.c_str());
  for (Member *m : r->members) {
    if (!m) continue;
    m->round = 0;
    if (m->conn) send(m->conn, wire::JoinError{code, failed_rank, what});
  }
  // Joiners go back to waiting for the next grow.
  for (Member *j : r->joiners) {
    j->round = 0;
    if (!j->conn) continue;
    j->state = Member::State::Pending;
    send(j->conn, wire::JoinAdmitted{0, 0});
  }
  emit(NEXAR_SEED_EVENT_GROW_FAILED, failed_rank, what);
  rounds_.erase(std::remove_if(rounds_.begin(), rounds_.end(),
                               [r](const std::unique_ptr<Round> &o) { return o.get() == r; }),
                rounds_.end());
  tell_pending();
}

void Seed::elastic_closed(Member *m, Member::State prev, const std::string &why) {
  Round *r = round_of(m);
  if (prev == Member::State::Pending) {
    LOG_INFO("a waiting joiner left: %s: %s", m->describe().c_str(), why.c_str());
    tell_pending();
  } else if (r && prev == Member::State::Growing) {
    LOG_WARN("joiner %s was lost during a grow (%s): not admitted", m->describe().c_str(),
             why.c_str());
    drop_joiner(r, m);
  } else if (r) {
    m->round = 0;
    auto at = std::find(r->members.begin(), r->members.end(), m);
    int32_t rank = -1;
    if (at != r->members.end()) {
      rank = static_cast<int32_t>(at - r->members.begin());
      *at = nullptr;
    }
    fail_round(r, NEXAR_ERR_PEER_FAILED, rank,
               format("rank %d (%s) was lost during the grow: %s", rank, m->describe().c_str(),
                      why.c_str()));
  }
}

void Seed::sweep_rounds() {
  const uint64_t now = now_ns();
  for (size_t i = 0; i < rounds_.size(); ++i) {
    Round *r = rounds_[i].get();
    if (now < r->deadline_ns) continue;
    if (r->meshing) {
      fail_round(r, NEXAR_ERR_TIMEOUT, -1, "the grown mesh did not form in time");
    } else {
      int32_t first = -1;
      std::string missing;
      for (uint32_t k = 0; k < r->members.size(); ++k) {
        if (r->members[k]) continue;
        if (first < 0) first = static_cast<int32_t>(k);
        missing += format("%s%u", missing.empty() ? "" : ",", k);
      }
      fail_round(r, NEXAR_ERR_TIMEOUT, first,
                 format("rank(s) %s of the communicator never asked to grow", missing.c_str()));
    }
    --i;  // fail_round removed it
  }
}

}  // namespace nexar
