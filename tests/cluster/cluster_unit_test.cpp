// Unit tests of the cluster internals: Slurm node lists, derived ports,
// NCCL-style interface filters, environment precedence, tokens and proofs,
// CA persistence and certificate requests, join messages on the wire.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "cluster/env_detect.h"
#include "cluster/interface_select.h"
#include "cluster/join_protocol.h"
#include "core/log.h"
#include "transport/codec.h"
#include "transport/tls_credentials.h"

using namespace nexar;

namespace {

EnvLookup lookup(const std::map<std::string, std::string> &vars) {
  return [vars](const char *name) -> const char * {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string temp_dir() {
  char tmpl[] = "/tmp/nexar-cluster-unit-XXXXXX";
  return mkdtemp(tmpl);
}

}  // namespace

TEST(SlurmNodeList, FirstHost) {
  EXPECT_EQ(first_host("node[01-04]"), "node01");
  EXPECT_EQ(first_host("node[07,01-04]"), "node07");
  EXPECT_EQ(first_host("gpu1,gpu2"), "gpu1");
  EXPECT_EQ(first_host("rack[1-2]-n[3-4],login"), "rack1-n3");
  EXPECT_EQ(first_host("single"), "single");
}

TEST(SlurmNodeList, PortFromJobId) {
  EXPECT_EQ(port_from_job_id("1234"), 61440 + 1234 % 4096);
  EXPECT_EQ(port_from_job_id("1234"), port_from_job_id("1234"));
  const uint16_t p = port_from_job_id("1234.5");
  EXPECT_GE(p, 61440);
  EXPECT_LT(p, 61440 + 4096);
}

TEST(InterfaceFilter, NcclSyntax) {
  EXPECT_TRUE(interface_matches("eth", "eth0"));
  EXPECT_TRUE(interface_matches("eth0,ib", "ib1"));
  EXPECT_FALSE(interface_matches("eth", "lo"));
  EXPECT_FALSE(interface_matches("^lo,docker", "lo"));
  EXPECT_FALSE(interface_matches("^lo,docker", "docker0"));
  EXPECT_TRUE(interface_matches("^lo,docker", "eth0"));
  EXPECT_TRUE(interface_matches("=eth0", "eth0"));
  EXPECT_FALSE(interface_matches("=eth0", "eth01"));
  EXPECT_TRUE(interface_matches("^=eth0", "eth01"));
}

TEST(InterfaceSelect, LoopbackSeedAndOverrides) {
  Config cfg;
  SocketAddress seed, bound, adv;
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:5000", &seed).ok());
  ListenChoice c;
  ASSERT_TRUE(choose_listen_address(cfg, seed, &c).ok());
  EXPECT_TRUE(c.bind.is_loopback()) << c.bind.to_string();
  cfg.listen_address = "127.0.0.1:0";
  ASSERT_TRUE(choose_listen_address(cfg, seed, &c).ok());
  EXPECT_EQ(c.how, "NEXAR_LISTEN_ADDR");
  ASSERT_TRUE(SocketAddress::parse("127.0.0.1:4242", &bound).ok());
  cfg.advertise_address = "127.0.0.2";
  ASSERT_TRUE(advertised_address(cfg, bound, seed, &adv).ok());
  EXPECT_EQ(adv.to_string(), "127.0.0.2:4242");
  // Loopback advertised to a seed elsewhere is refused.
  SocketAddress far;
  ASSERT_TRUE(SocketAddress::parse("192.0.2.1:5000", &far).ok());
  cfg.advertise_address.clear();
  Status s = advertised_address(cfg, bound, far, &adv);
  EXPECT_EQ(s.code, NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("loopback"), std::string::npos) << s.message;
  cfg.listen_address.clear();
  cfg.socket_ifname = "=no-such-interface";
  s = choose_listen_address(cfg, seed, &c);
  EXPECT_EQ(s.code, NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("no-such-interface"), std::string::npos) << s.message;
}

TEST(EnvDetect, Precedence) {
  EnvPlan p;
  ASSERT_TRUE(detect_environment(lookup({{"NEXAR_SEED", "10.0.0.1:7"},
                                         {"NEXAR_RANK", "3"},
                                         {"RANK", "1"},
                                         {"WORLD_SIZE", "4"},
                                         {"MASTER_ADDR", "h"},
                                         {"MASTER_PORT", "29500"}}),
                                 &p)
                  .ok());
  EXPECT_EQ(p.source, "NEXAR_SEED");
  EXPECT_EQ(p.rank, 3);
  EXPECT_FALSE(p.host_seed);

  ASSERT_TRUE(detect_environment(lookup({{"RANK", "0"},
                                         {"WORLD_SIZE", "4"},
                                         {"MASTER_ADDR", "10.1.2.3"},
                                         {"MASTER_PORT", "29500"},
                                         {"SLURM_PROCID", "2"},
                                         {"SLURM_NTASKS", "4"}}),
                                 &p)
                  .ok());
  EXPECT_EQ(p.source, "torchrun");
  EXPECT_EQ(p.seed_address, "10.1.2.3:29500");
  EXPECT_TRUE(p.host_seed);
  EXPECT_FALSE(p.all_local);
  ASSERT_TRUE(detect_environment(lookup({{"RANK", "0"},
                                         {"WORLD_SIZE", "4"},
                                         {"LOCAL_WORLD_SIZE", "4"},
                                         {"MASTER_ADDR", "127.0.0.1"},
                                         {"MASTER_PORT", "29500"}}),
                                 &p)
                  .ok());
  EXPECT_TRUE(p.all_local);  // no warning about a loopback seed

  ASSERT_TRUE(detect_environment(lookup({{"OMPI_COMM_WORLD_RANK", "1"},
                                         {"OMPI_COMM_WORLD_SIZE", "2"},
                                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                         {"NEXAR_PORT", "7000"}}),
                                 &p)
                  .ok());
  EXPECT_EQ(p.source, "Open MPI");
  EXPECT_EQ(p.seed_address, "127.0.0.1:7000");
  EXPECT_FALSE(p.host_seed);
  EXPECT_TRUE(p.all_local);

  ASSERT_TRUE(
      detect_environment(
          lookup(
              {{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"MASTER_ADDR", "head"}, {"PMI_JOBID", "77"}}),
          &p)
          .ok());
  EXPECT_EQ(p.source, "PMI");
  EXPECT_EQ(p.seed_address, "head:" + std::to_string(61440 + 77));
  EXPECT_TRUE(p.host_seed);

  ASSERT_TRUE(detect_environment(lookup({{"SLURM_PROCID", "3"},
                                         {"SLURM_NTASKS", "8"},
                                         {"SLURM_JOB_ID", "4321"},
                                         {"SLURM_STEP_NODELIST", "gpu[07-08]"}}),
                                 &p)
                  .ok());
  EXPECT_EQ(p.source, "Slurm");
  EXPECT_EQ(p.seed_address, "gpu07:" + std::to_string(61440 + 4321 % 4096));
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.world_size, 8u);
  EXPECT_FALSE(p.all_local);

  // Multi-host Open MPI with no coordinator: a clear error.
  Status s = detect_environment(
      lookup({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}), &p);
  EXPECT_EQ(s.code, NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("MASTER_ADDR"), std::string::npos) << s.message;

  s = detect_environment(lookup({}), &p);
  EXPECT_EQ(s.code, NEXAR_ERR_NOT_FOUND);
  for (const char *v :
       {"NEXAR_SEED", "MASTER_ADDR", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    EXPECT_NE(s.message.find(v), std::string::npos) << v << ": " << s.message;

  s = detect_environment(lookup({{"SLURM_PROCID", "9"}, {"SLURM_NTASKS", "4"}}), &p);
  EXPECT_EQ(s.code, NEXAR_ERR_INVALID_ARGUMENT);
}

TEST(Token, ProofsAreSessionAndRoleBound) {
  join::Secret a{}, b{};
  b[0] = 1;
  const std::string p = join::proof("secret", a, "seed");
  EXPECT_EQ(p.size(), join::kProofLen);
  EXPECT_TRUE(join::proof_matches("secret", a, "seed", p));
  EXPECT_FALSE(join::proof_matches("secret", a, "worker", p));  // no reflection
  EXPECT_FALSE(join::proof_matches("secret", b, "seed", p));    // bound to the session
  EXPECT_FALSE(join::proof_matches("other", a, "seed", p));
  EXPECT_FALSE(join::proof_matches("secret", a, "seed", p.substr(1)));
  EXPECT_EQ(p.find("secret"), std::string::npos);
}

TEST(Token, File) {
  const std::string dir = temp_dir();
  const std::string f = dir + "/token";
  {
    std::ofstream o(f);
    o << "abc123\n";
  }
  chmod(f.c_str(), 0600);
  std::string t;
  ASSERT_TRUE(join::load_token("", f, &t).ok());
  EXPECT_EQ(t, "abc123");
  ASSERT_TRUE(join::load_token("explicit", f, &t).ok());
  EXPECT_EQ(t, "explicit");
  EXPECT_FALSE(join::load_token("", dir + "/missing", &t).ok());
  unlink(f.c_str());
  rmdir(dir.c_str());
}

TEST(ClusterCa, PersistsWithPrivateKeyMode) {
  const std::string dir = temp_dir() + "/ca";
  std::unique_ptr<ClusterCa> a, b;
  bool created = false;
  ASSERT_TRUE(ClusterCa::load_or_create(dir, &a, &created).ok());
  EXPECT_TRUE(created);
  struct stat st;
  ASSERT_EQ(stat((dir + "/ca-key.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(ClusterCa::load_or_create(dir, &b, &created).ok());
  EXPECT_FALSE(created);
  EXPECT_EQ(a->cluster_id(), b->cluster_id());
  EXPECT_EQ(cert_fingerprint(a->cert()), cert_fingerprint(b->cert()));

  // A leaf issued by the reloaded CA chains to the original anchor.
  X509Key key;
  std::string csr;
  ASSERT_TRUE(generate_key(&key).ok());
  ASSERT_TRUE(make_csr_pem(key.get(), &csr).ok());
  X509Cert leaf;
  ASSERT_TRUE(b->issue_from_csr(5, csr, &leaf).ok());
  EXPECT_TRUE(cert_matches_key(leaf.get(), key.get()));
  NodeIdentity id;
  ASSERT_TRUE(cert_identity(leaf.get(), &id).ok());
  EXPECT_EQ(id.rank, 5u);
  EXPECT_EQ(id.cluster_id, a->cluster_id());
  gnutls_x509_crt_t anchors[1] = {a->cert()}, chain[1] = {leaf.get()};
  unsigned verify = 1;
  ASSERT_GE(gnutls_x509_crt_list_verify(chain, 1, anchors, 1, nullptr, 0, 0, &verify), 0);
  EXPECT_EQ(verify, 0u);

  // A key file others can read is refused.
  chmod((dir + "/ca-key.pem").c_str(), 0644);
  Status s = ClusterCa::load_or_create(dir, &b, &created);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message.find("chmod 600"), std::string::npos) << s.message;
}

TEST(ClusterCa, RejectsBadRequests) {
  std::unique_ptr<ClusterCa> ca;
  ASSERT_TRUE(ClusterCa::generate(1, &ca).ok());
  X509Cert leaf;
  EXPECT_FALSE(ca->issue_from_csr(0, "", &leaf).ok());
  EXPECT_FALSE(
      ca->issue_from_csr(0, "-----BEGIN NEW CERTIFICATE REQUEST-----\nAAAA\n", &leaf).ok());
  X509Key key;
  std::string csr;
  ASSERT_TRUE(generate_key(&key).ok());
  ASSERT_TRUE(make_csr_pem(key.get(), &csr).ok());
  // Flip one character inside the base64 body: the signature no longer verifies
  // (or the request no longer parses).
  std::string bad = csr;
  const size_t mid = bad.size() / 2;
  bad[mid] = bad[mid] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(ca->issue_from_csr(0, bad, &leaf).ok());
}

TEST(JoinMessages, RoundTripAndLimits) {
  wire::Welcome w;
  w.rank = 2;
  w.world_size = 3;
  w.cluster_id = 0x1234;
  w.ca_pem = "ca";
  w.cert_pem = "cert";
  w.peers = {"10.0.0.1:1", "10.0.0.2:2", "[::1]:3"};
  std::vector<wire::ControlMessage> msgs = {
      wire::JoinChallenge{1, 1, std::string(32, 'x'), 3, 1000},
      wire::JoinRequest{1, std::string(32, 'y'), -1, 0, "10.0.0.1:1", "csr", "host", 42},
      wire::JoinAdmitted{1, 3},
      w,
      wire::MeshReady{2, 0x0123456789abcdefULL},
      wire::JoinError{NEXAR_ERR_AUTH, -1, "no"}};
  for (const auto &m : msgs) {
    auto enc = wire::encode_control(m);
    auto dec = wire::decode_control(enc);
    ASSERT_TRUE(dec) << dec.error;
    EXPECT_TRUE(*dec.message == m) << wire::control_name(m);
    // Every truncation fails cleanly.
    for (size_t n = 0; n < enc.size(); ++n)
      EXPECT_FALSE(wire::decode_control(std::span<const uint8_t>(enc.data(), n)));
  }
  // A list that claims more entries than the bytes could hold is refused
  // before anything is reserved.
  std::vector<uint8_t> b = wire::encode_control(w);
  const size_t count_at = b.size() - (4 + 10) - (4 + 10) - (4 + 7) - 4;
  b[count_at] = 0xff;
  b[count_at + 1] = 0xff;
  auto dec = wire::decode_control(b);
  EXPECT_FALSE(dec);
  EXPECT_NE(dec.error.find("Welcome.peers"), std::string::npos) << dec.error;
}

// Addresses from the network (a worker's advertised address at the seed, the
// peers of a Welcome at the worker) are numeric: a host name would make the
// parsing thread wait on the resolver, outside every deadline.
TEST(SocketAddress, ParseNumericNeverResolves) {
  SocketAddress a;
  EXPECT_TRUE(SocketAddress::parse_numeric("127.0.0.1:5000", &a));
  EXPECT_EQ(a.to_string(), "127.0.0.1:5000");
  EXPECT_TRUE(SocketAddress::parse_numeric("[::1]:443", &a));
  EXPECT_EQ(a.to_string(), "[::1]:443");
  for (const char *bad : {"localhost:5000", "example.invalid:1", "127.0.0.1", "127.0.0.1:0",
                          "127.0.0.1:65536", "127.0.0.1:+80", "[::1]443", "", ":80"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(SocketAddress::parse_numeric(bad, &a));
  }
}

// What a peer sends (a host name, a reason) reaches a log line or an error
// message on one line: a newline could forge a line of its own.
TEST(LogText, PeerTextStaysOnOneLine) {
  EXPECT_EQ(log::one_line("node7"), "node7");
  EXPECT_EQ(log::one_line("a\nnexar[x:1:r0] error: forged\r\x1b[2J"),
            "a?nexar[x:1:r0] error: forged??[2J");
  EXPECT_EQ(log::one_line("h\xc3\xa9te"), "h\xc3\xa9te");  // UTF-8 stays
  EXPECT_EQ(log::one_line(std::string(300, 'x'), 8), "xxxxxxxx...");
}

// A line a flood can repeat (QuicEndpoint's Retry and drop warnings) is said
// at once, then at most once per interval.
TEST(LogText, ThrottleSpeaksOncePerInterval) {
  log::Throttle t(10);
  EXPECT_TRUE(t.due(0));  // the first time, even at time 0
  EXPECT_FALSE(t.due(0));
  EXPECT_FALSE(t.due(9));
  EXPECT_TRUE(t.due(10));
  EXPECT_FALSE(t.due(19));
  EXPECT_TRUE(t.due(1000));
}
