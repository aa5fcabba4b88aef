// The authorization table of actors/authorization.hpp, tried from outside against a real coordinator
// process: a CAF client without a token, a client that joined with the token and then sends what a
// node may not, and TLS peers without a certificate of the run's CA. Each refused class is counted by
// the coordinator, and the run goes on. Loopback only; every wait is bounded.
#include <map>
#include <set>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <doctest/doctest.h>

#include "actors/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "messages/envelope.hpp"
#include "messages/message_types.hpp"
#include "storage/checkpoint_store.hpp"
#include "tests/multisite/process.hpp"
#include "tests/multisite/run_args.hpp"

using namespace multisite;
using namespace archipelago;
using namespace archipelago::actors;

namespace {

// A CAF 0.17 client as any outsider can write one: the io middleman and the same heartbeat settings.
struct Client {
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  Client() {
    TransportOptions transport;
    REQUIRE(configure_transport(config, transport).ok());
    config.set("logger.console-verbosity", caf::atom("quiet"));
    system = std::make_unique<caf::actor_system>(config);
  }
  caf::actor connect(int port) {
    auto gateway = system->middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(port));
    REQUIRE_MESSAGE(gateway, system->render(gateway.error()));
    return *gateway;
  }
};

// Whether a request of `message` to `target` got any answer but an error within 3 s.
template <class... Ts>
bool answered(Client& client, const caf::actor& target, Ts&&... message) {
  caf::scoped_actor self{*client.system};
  bool ok = false;
  self->request(target, std::chrono::seconds(3), std::forward<Ts>(message)...)
      .receive([&](caf::message&) { ok = true; }, [&](caf::error&) { ok = false; });
  return ok;
}

int64_t refused(const nlohmann::json& summary, const std::string& reason) {
  return summary["refused"]["by_reason"].value(reason, int64_t{-1});
}

std::string token_of(const Scratch& s) {
  std::string token = read_file(s.token);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  return token;
}

}  // namespace

TEST_CASE("a CAF client without a token gets nothing and stops nothing") {
  Scratch s("authz-tokenless");
  const int port = free_port();
  auto run = start_two_learner_run(s, port, {"train.max_seconds=20"});
  Process& coordinator = *run.coordinator;
  Process& node = *run.node;

  Client client;
  auto gateway = client.connect(port);
  // The shapes the gateway took before: a bare stop, and a status request.
  caf::anon_send(gateway, stop_atom::value);
  CHECK_FALSE(answered(client, gateway, admin_atom::value, admin_request("outsider", "status")));
  // A stop with a made-up key, and a link's message sent to the gateway.
  caf::anon_send(gateway, stop_atom::value, std::string(32, '0'));
  CHECK_FALSE(answered(client, gateway, up_atom::value, std::string(32, '0'), syncer_name(), gateway,
                       admin_request("learner-0", "status")));
  // No actor of the coordinator is reachable by name, the way CAF's registry would answer it.
  for (auto name : {syncer_name(), store_name(), monitor_name(), caf::atom("root"), caf::atom("gateway"),
                    caf::atom("evaluator")}) {
    CAPTURE(caf::to_string(name));
    CHECK(client.system->middleman().remote_lookup(name, gateway.node()) == nullptr);
  }
  // A join without the token is answered with a refusal and nothing else.
  {
    Outbox outbox("outsider");
    auto join = outbox.wrap(messages::Join{"", "outsider", "nowhere", "cpu", 0, ""});
    REQUIRE(join.ok());
    caf::scoped_actor self{*client.system};
    bool refused_join = false;
    self->request(gateway, std::chrono::seconds(5), nodejoin_atom::value, std::move(*join), int32_t{1}, int32_t{-1},
                  caf::actor_cast<caf::actor>(self))
        .receive(
            [&](WireBytes& bytes, std::string& config, std::string&, std::string&, int32_t, caf::actor& link,
                std::string& key) {
              auto welcome = unwrap(std::move(bytes));
              REQUIRE(welcome.ok());
              CHECK_FALSE(std::get<messages::Welcome>(welcome->body).accepted);
              CHECK(config.empty());  // not even the run's configuration
              CHECK_FALSE(link);
              CHECK(key.empty());
              refused_join = true;
            },
            [&](caf::error& e) { FAIL("join request failed: " << client.system->render(e)); });
    CHECK(refused_join);
  }
  const int64_t after_attack = coordinator.last_value("version");
  // The run goes on: versions keep coming, the node keeps training until the time budget.
  CHECK_MESSAGE(wait_until([&] { return coordinator.last_value("version") >= after_attack + 3; }, 30),
                coordinator.all());
  CHECK(node.running());
  const int code = coordinator.wait(90);
  CAPTURE(coordinator.all());
  REQUIRE(code == 0);
  CHECK_MESSAGE(node.wait(30) == 0, node.all());
  auto summary = coordinator.summary();
  CHECK(summary["stopped_by"] == "max_seconds");
  CHECK(summary["joins_refused"]["missing_token"].get<int>() == 1);
  CHECK(summary["joins_accepted"].get<int>() == 1);
  // stop, the admin request and the link message had no handler: unauthenticated; the keyed stop: wrong key.
  CHECK(refused(summary, "unauthenticated") == 3);
  CHECK(refused(summary, "wrong_key") == 1);
  CHECK(coordinator.err().find("gateway refused a 'stop' message: unauthenticated") != std::string::npos);
}

TEST_CASE("an admitted node may send only its learners' messages, for its own learners") {
  Scratch s("authz-node");
  const int port = free_port();
  auto run = start_two_learner_run(s, port, {"train.max_seconds=20"});
  Process& coordinator = *run.coordinator;
  Process& node = *run.node;

  // A client that holds the join token and joins as a one-learner node, then misbehaves on its link.
  Client client;
  auto gateway = client.connect(port);
  auto watcher = client.system->spawn([](caf::event_based_actor* self) -> caf::behavior {
    self->set_default_handler(caf::drop);  // takes whatever the coordinator sends and does nothing
    return {[](int32_t) {}};
  });
  caf::actor link;
  std::string key;
  int first = -1;
  {
    Outbox outbox("forger");
    auto join = outbox.wrap(messages::Join{"", "forger", "site-x", "cpu", 0, token_of(s)});
    REQUIRE(join.ok());
    caf::scoped_actor self{*client.system};
    self->request(gateway, std::chrono::seconds(10), nodejoin_atom::value, std::move(*join), int32_t{1}, int32_t{-1},
                  watcher)
        .receive(
            [&](WireBytes&, std::string&, std::string&, std::string&, int32_t f, caf::actor& l, std::string& k) {
              link = l;
              key = k;
              first = f;
            },
            [&](caf::error& e) { FAIL("join request failed: " << client.system->render(e)); });
  }
  REQUIRE(link);
  REQUIRE(key.size() == 32);
  const std::string own = learner_id(first);
  const std::string other = learner_id(first == 0 ? 1 : 0);
  auto up = [&](const std::string& with_key, caf::atom_value role, WireBytes bytes) {
    caf::anon_send(link, up_atom::value, with_key, role, watcher, std::move(bytes));
  };
  // 1. Every message kind a node's learners do not send to a role, to each role: among them a
  //    version far ahead for the store (Persist chunk + CommitEnd), admin requests, Welcomes and
  //    GlobalFragments as if from the coordinator's side, a Restore. The allowed ones are the spec:
  const std::map<caf::atom_value, std::set<std::string>> allowed = {
      {syncer_name(), {"join", "fragment_update", "leave"}},
      {store_name(), {"fetch"}},
      {monitor_name(), {"heartbeat", "leave", "slot_report"}}};
  Outbox as_own(own);
  const std::vector<messages::Message> every_kind = {
      messages::Join{own, "n", "s", "cpu", 0, token_of(s)},
      messages::Welcome{5, 4, true, ""},
      messages::FragmentUpdate{own, 0, 1, 1, 1, 1.0f, {}},
      messages::GlobalFragment{0, 5, {}, 0, 0},
      messages::Heartbeat{own, 1, 1.0, 0},
      messages::Persist{999, 0, messages::PersistKind::parameters, {}, ""},
      messages::Persisted{999, true, ""},
      messages::Leave{own, "finished", messages::LeaveCode::finished},
      messages::AdminRequest{1, "status", {}},
      messages::AdminReply{1, true, "", "{}"},
      messages::Fetch{own, {}},
      messages::Restore{1},
      messages::CommitEnd{999, "{}"},
      messages::AdminCommand{1, messages::AdminVerb::status},
      messages::SlotReport{own},
      messages::LearnerControl{1, messages::ControlAction::kill_node, ""},
  };
  REQUIRE(every_kind.size() == std::variant_size_v<messages::Message>);
  int64_t forbidden = 0;
  for (const auto& [role, kinds] : allowed) {
    for (const auto& message : every_kind) {
      if (kinds.count(messages::message_name(message))) continue;
      auto bytes = as_own.wrap(message);
      REQUIRE(bytes.ok());
      up(key, role, *bytes);
      forbidden += 1;
    }
  }
  REQUIRE(forbidden == 3 * 16 - 7);
  // 2. A heartbeat as a learner of another node.
  Outbox as_other(other);
  auto beat = as_other.wrap(messages::Heartbeat{other, 1, 1.0, 0});
  REQUIRE(beat.ok());
  up(key, monitor_name(), *beat);
  // 3. The right kind with a wrong session key, and 4. a stop to the link, which only the gateway sends.
  auto own_beat = as_own.wrap(messages::Heartbeat{own, 1, 1.0, 0});
  REQUIRE(own_beat.ok());
  up(std::string(32, 'f'), monitor_name(), *own_beat);
  caf::anon_send(link, stop_atom::value, key);

  const int64_t after_attack = coordinator.last_value("version");
  CHECK_MESSAGE(wait_until([&] { return coordinator.last_value("version") >= after_attack + 3; }, 30),
                coordinator.all());
  CHECK(node.running());
  // The forger leaves (its process would end): its session and slot end with the connection.
  link = caf::actor{};
  caf::anon_send_exit(watcher, caf::exit_reason::kill);
  watcher = caf::actor{};
  gateway = caf::actor{};
  client.system.reset();
  const int code = coordinator.wait(90);
  CAPTURE(coordinator.all());
  REQUIRE(code == 0);
  CHECK_MESSAGE(node.wait(30) == 0, node.all());
  auto summary = coordinator.summary();
  CHECK(refused(summary, "kind_not_allowed") == forbidden);
  CHECK(refused(summary, "foreign_learner") == 1);
  CHECK(refused(summary, "wrong_key") == 2);
  CHECK(summary["rejected_updates"].get<int64_t>() == 0);
  CHECK(summary["final_version"].get<uint64_t>() < 999);
  // The forged commit never reached the store.
  auto store = storage::CheckpointStore::open((s.dir / "run" / "store").string());
  REQUIRE_MESSAGE(store, store.error().reason);
  auto list = (*store)->list();
  REQUIRE(list);
  for (const auto& info : *list) CHECK(info.version < 999);
}

namespace {

// A CA, and a certificate for 127.0.0.1 it signed, under `dir` with the file names' prefix.
void make_ca_and_certificate(const fs::path& dir, const std::string& prefix) {
  const std::string d = dir.string();
  const std::string p = prefix;
  const std::string command =
      "cd " + d + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + p + "ca.key -out " + p +
      "ca.pem -days 1 -subj /CN=" + p + "ca && openssl req -newkey rsa:2048 -nodes -keyout " + p + "node.key -out " + p +
      "node.csr -subj /CN=127.0.0.1 && openssl x509 -req -in " + p + "node.csr -CA " + p + "ca.pem -CAkey " + p +
      "ca.key -CAcreateserial -out " + p + "node.pem -days 1 > " + p + "openssl.log 2>&1";
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, read_file(dir / (p + "openssl.log")));
}

fs::path tls_config(const fs::path& dir, const std::string& prefix, const std::string& ca_prefix) {
  const auto path = dir / (prefix + "tls.toml");
  const std::string d = dir.string();
  std::ofstream(path) << "[net]\ntls = true\ntls_certificate = \"" << d << "/" << prefix << "node.pem\"\ntls_key = \"" << d
                      << "/" << prefix << "node.key\"\ntls_ca = \"" << d << "/" << ca_prefix << "ca.pem\"\n";
  return path;
}

}  // namespace

TEST_CASE("a TLS coordinator refuses a plain-TCP node and a node whose certificate another CA signed") {
  Scratch s("authz-tls");
  make_ca_and_certificate(s.dir, "");
  make_ca_and_certificate(s.dir, "other-");
  const int port = free_port();
  const std::vector<std::string> tls{"--config", tls_config(s.dir, "", "").string()};
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=0"}, tls), s.dir);
  await_listening(coordinator);

  // Each gives up after 4 s of failed attempts: its TLS (or plain) handshake never completes a join.
  const std::vector<std::string> give_up{"--give-up-after", "4"};
  auto plain_args = node_args(s, port, "plain-node", give_up);
  Process plain("plain-node", plain_args, s.dir);
  auto other = give_up;
  other.push_back("--config");
  other.push_back(tls_config(s.dir, "other-", "other-").string());
  Process foreign("other-ca-node", node_args(s, port, "other-ca-node", other), s.dir);
  const int plain_code = plain.wait(60);
  const int foreign_code = foreign.wait(60);
  CHECK_MESSAGE(plain_code != 0, plain.all());
  CHECK_MESSAGE(plain.err().find("gave up after") != std::string::npos, plain.all());
  CHECK_MESSAGE(foreign_code != 0, foreign.all());
  CHECK_MESSAGE(foreign.err().find("gave up after") != std::string::npos, foreign.all());
  CHECK(coordinator.running());
  // A node with the run's CA is still admitted afterwards.
  Process good("node-a", node_args(s, port, "node-a", tls), s.dir);
  CHECK_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "admitted node 'node-a'") == 1; }, 40),
                coordinator.all() << good.all());
  coordinator.kill(SIGTERM);
  REQUIRE(coordinator.wait(60) == 0);
  CAPTURE(coordinator.all());
  auto summary = coordinator.summary();
  CHECK(summary["joins_accepted"].get<int>() == 1);
  CHECK(coordinator.err().find("admitted node 'plain-node'") == std::string::npos);
  CHECK(coordinator.err().find("admitted node 'other-ca-node'") == std::string::npos);
}

TEST_CASE("the console: an admin session with the admin token answers status, learners, nodes and versions") {
  Scratch s("authz-console");
  const auto admin_token = s.dir / "admin-token";
  std::ofstream(admin_token) << "admin-horse-battery-staple-0123456789\n";
  chmod(admin_token.c_str(), 0600);
  const int port = free_port();
  // A 6 s restart backoff: a killed learner stays `restarting` longer than a console poll takes under load.
  auto run = start_two_learner_run(s, port, {"train.max_seconds=0", "runtime.backoff_initial_s=6",
                                                        "runtime.backoff_max_s=6"},
                                   {"--admin-token-file", admin_token.string()});
  Process& coordinator = *run.coordinator;
  Process& node = *run.node;
  Process node_b("node-b", node_args(s, port, "node-b"), s.dir);  // two nodes, every slot taken

  const std::string target = "127.0.0.1:" + std::to_string(port);
  int opened = 0;  // admin sessions the gateway accepted
  auto console = [&](const std::string& command, const fs::path& token) {
    if (token == admin_token && command != "launch-missiles") opened += 1;
    static int invocation = 0;  // each its own output files
    Process p("console-" + std::to_string(++invocation), {"console", target, "-c", command, "--json", "--admin-token-file", token.string()},
              s.dir);
    const int code = p.wait(30);
    return std::make_tuple(code, p.out(), p.err());
  };
  auto answer = [&](const std::string& command) {
    auto [code, out, err] = console(command, admin_token);
    INFO(command << ": " << out << err);
    REQUIRE(code == 0);
    auto json = nlohmann::json::parse(out.substr(0, out.find('\n')), nullptr, false);
    REQUIRE(json.is_object());
    return json;
  };
  nlohmann::json status;
  REQUIRE_MESSAGE(wait_until([&] { return (status = answer("status"))["learners_alive"] == 4; }, 60),
                  status.dump() << node_b.all());
  CHECK(status["mode"] == "decoupled");
  CHECK(status["committed_version"].get<uint64_t>() >= 3);
  CHECK(status["bytes_up"].get<int64_t>() > 0);
  CHECK(status["bytes_down"].get<int64_t>() > 0);
  CHECK(status["uptime_s"].get<double>() > 0);
  CHECK((status["heldout_loss"].is_null() || status["heldout_loss"].get<double>() > 0));

  auto learners = answer("learners")["learners"];
  REQUIRE(learners.size() == 4);
  for (const auto& l : learners) {
    CAPTURE(l.dump());
    CHECK(l["node"] == (l["id"] == "learner-0" || l["id"] == "learner-1" ? "node-a" : "node-b"));
    CHECK(l["site"] == "local");
    CHECK(l["state"] == "alive");
    CHECK(l["step"].get<int64_t>() > 0);
    CHECK(l["joins"].get<int>() == 1);
    CHECK(l["restarts"].get<int>() == 0);
    CHECK(l["heartbeat_age_s"].get<double>() >= 0);
    CHECK(l["heartbeat_age_s"].get<double>() < 5);   // it beats every step
    CHECK(l["tokens_per_s"].get<double>() > 0);
    if (l["contributions_merged"].get<int>() > 0) {
      CHECK(l["staleness"].get<int64_t>() >= 0);
    } else {
      CHECK(l["staleness"].is_null());  // not measured before its first merge
    }
  }
  auto nodes = answer("nodes");
  REQUIRE(nodes["nodes"].size() == 2);
  std::set<std::string> node_names;
  for (const auto& n : nodes["nodes"]) {
    node_names.insert(n["node"].get<std::string>());
    CHECK(n["learners"] == 2);
  }
  CHECK(node_names == std::set<std::string>{"node-a", "node-b"});
  CHECK(nodes["learner_slots"] == 4);
  auto versions = answer("versions");
  REQUIRE(versions["versions"].size() >= 3);
  CHECK(versions["latest"].get<uint64_t>() >= 3);
  // Listed first, then the latest asked for: a commit may land in between.
  CHECK(versions["versions"].back()["version"].get<uint64_t>() <= versions["latest"].get<uint64_t>());

  // Mutating commands, each audited before it acts: pin and unpin a version, a pin of a version that
  // does not exist (refused by the store, audited as failed), and a kill of the syncer, which its
  // supervisor restarts from RocksDB.
  const uint64_t v = versions["versions"].back()["version"].get<uint64_t>();
  CHECK(answer("pin " + std::to_string(v))["pinned"] == true);
  auto pinned = [&](uint64_t version) {
    const auto listed = answer("versions");
    for (const auto& e : listed["versions"]) {
      if (e["version"].get<uint64_t>() == version) return e["pinned"].get<bool>();
    }
    return false;
  };
  CHECK(pinned(v));
  CHECK(answer("unpin " + std::to_string(v))["pinned"] == false);
  CHECK_FALSE(pinned(v));
  {
    auto [code, out, err] = console("pin 999999", admin_token);
    CHECK(code == 1);
    CHECK(err.find("pin") != std::string::npos);
  }
  auto killed = answer("kill syncer");
  const uint64_t at_kill = killed["version_at_kill"].get<uint64_t>();
  CHECK(at_kill >= v);
  CHECK_MESSAGE(wait_until([&] { return coordinator.err().find("syncer exited (exit_reason(kill))") != std::string::npos; }, 10),
                coordinator.all());
  nlohmann::json after_kill;
  CHECK_MESSAGE(wait_until([&] {
                  after_kill = answer("status");
                  return after_kill["committed_version"].get<uint64_t>() > at_kill;
                }, 30),
                after_kill.dump() << coordinator.err().substr(coordinator.err().size() > 3000 ? coordinator.err().size() - 3000 : 0));
  auto audit = answer("audit 50")["audit"];
  std::vector<std::string> trail;
  for (const auto& e : audit) {
    const auto& entry = e["entry"];
    CHECK(entry["peer"].get<std::string>().rfind("console@", 0) == 0);
    std::string line = entry["command"]["verb"].get<std::string>() + " " + entry["phase"].get<std::string>();
    if (entry.contains("ok")) line += entry["ok"].get<bool>() ? " ok" : " failed";
    trail.push_back(line);
  }
  const std::vector<std::string> expected = {"pin requested", "pin done ok", "unpin requested", "unpin done ok",
                                             "pin requested", "pin done failed", "kill_syncer requested",
                                             "kill_syncer done ok"};
  CHECK(trail == expected);

  // The prompt reads commands from standard input too (libedit; it shows no prompt off a terminal).
  {
    const auto out = s.dir / "prompt.out";
    const std::string command = "printf 'help\\nnodes\\nbogus\\nquit\\n' | " ARCHIPELAGO_BINARY " console " + target +
                                " --admin-token-file " + admin_token.string() + " > " + out.string() + " 2>&1";
    opened += 1;
    CHECK(std::system(command.c_str()) == 0);
    const std::string text = read_file(out);
    CAPTURE(text);
    CHECK(text.find("connected to " + target) != std::string::npos);
    CHECK(text.find("kill learner ID | node NAME | syncer") != std::string::npos);  // help lists the commands
    CHECK(text.find("\"learner_slots\": 4") != std::string::npos);  // nodes, pretty-printed
    CHECK(text.find("unknown command 'bogus'") != std::string::npos);
  }

  // Refused: the join token is not the admin token; an unknown command never reaches the coordinator.
  auto [wrong_code, wrong_out, wrong_err] = console("status", s.token);
  CHECK_MESSAGE(wrong_code == 3, wrong_err);
  CHECK(wrong_err.find("unauthenticated") != std::string::npos);
  CHECK(wrong_err.find("correct-horse") == std::string::npos);  // never the secret
  auto [unknown_code, unknown_out, unknown_err] = console("launch-missiles", admin_token);
  CHECK(unknown_code == 2);
  CHECK(unknown_err.find("unknown command 'launch-missiles'") != std::string::npos);

  // set: a runtime-tunable key changes the syncer's value; a bad value or another key is refused.
  CHECK(status["outer_lr"].get<double>() == doctest::Approx(0.7));
  auto set = answer("set outer.lr 0.5");
  CHECK(set["key"] == "outer.lr");
  CHECK(set["old"] == "0.7");
  CHECK(set["new"] == "0.5");
  CHECK(answer("status")["outer_lr"].get<double>() == doctest::Approx(0.5));
  {
    auto [code, out, err] = console("set outer.lr -1", admin_token);
    CHECK(code == 1);
    CHECK(err.find("outer.lr must be in (0, 10], not -1") != std::string::npos);
    auto [other_code, other_out, other_err] = console("set model.preset big", admin_token);
    CHECK(other_code == 1);
    CHECK(other_err.find("'model.preset' is not runtime-tunable") != std::string::npos);
  }
  CHECK(answer("status")["outer_lr"].get<double>() == doctest::Approx(0.5));  // the refusals changed nothing
  CHECK(answer("set outer.quorum 2")["new"] == "2");
  CHECK(answer("status")["quorum"].get<int>() == 2);

  CHECK(answer("set outer.codec int8")["old"] == "int4_uniform");  // the learners switch: metrics_test.cpp
  auto codec = answer("set outer.downlink_codec int8");
  CHECK(codec["old"] == "int4_uniform");  // config/default.toml
  CHECK(codec["new"] == "int8");
  CHECK(answer("set syncer.grace_max_s 3")["new"] == "3");

  // The learners: kill one (as abrupt as a crash), it is restarting, then alive again, one restart more.
  auto state_of = [&](const std::string& id) {
    const auto rows = answer("learners")["learners"];  // named: a range-for over a temporary's member dangles
    for (const auto& l : rows) {
      if (l["id"] == id) return l;
    }
    return nlohmann::json::object();
  };
  CHECK(answer("kill learner learner-1")["sent"][0]["node"] == "node-a");
  std::set<std::string> seen;
  nlohmann::json victim;
  CHECK_MESSAGE(wait_until([&] {
                  victim = state_of("learner-1");
                  seen.insert(victim.value("state", ""));
                  return seen.count("restarting") && victim.value("state", "") == "alive";
                }, 60),
                victim.dump());
  CHECK(victim["restarts"].get<int>() == 1);
  CHECK(victim["deaths"].get<int>() == 1);
  CHECK(state_of("learner-0")["state"] == "alive");  // nobody else was touched
  {
    auto [code, out, err] = console("kill learner learner-9", admin_token);
    CHECK(code == 1);
    CHECK(err.find("not a learner of this run") != std::string::npos);
  }

  // pause stops a learner's steps (it keeps beating: paused, not dead), resume restarts them.
  CHECK(answer("pause learner-0")["sent"].size() == 1);
  nlohmann::json paused;
  CHECK_MESSAGE(wait_until([&] { return (paused = state_of("learner-0")).value("state", "") == "paused"; }, 10),
                paused.dump());
  const int64_t paused_at = paused["step"].get<int64_t>();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto still = state_of("learner-0");
  CHECK(still["state"] == "paused");
  CHECK(still["step"].get<int64_t>() == paused_at);
  CHECK(still["heartbeat_age_s"].get<double>() < 2);
  CHECK(answer("resume")["sent"].size() == 4);  // every learner, on both nodes
  CHECK(wait_until([&] { return state_of("learner-0").value("step", int64_t{0}) > paused_at + 2; }, 20));

  // checkpoint commits what is pending now; version show reads one committed version back.
  auto checkpoint = answer("checkpoint");
  const uint64_t checkpointed = checkpoint["version"].get<uint64_t>();
  CHECK(checkpointed > at_kill);
  CHECK(wait_until([&] { return answer("status")["committed_version"].get<uint64_t>() >= checkpointed; }, 20));
  auto shown = answer("version show " + std::to_string(checkpointed));
  CHECK(shown["version"] == checkpointed);
  CHECK(shown["verified"] == true);
  CHECK(shown["blobs"].size() >= 4);
  CHECK(shown["manifest"].is_object());
  {
    auto [code, out, err] = console("version show 999999", admin_token);
    CHECK(code == 1);
    CHECK(err.find("no committed version 999999") != std::string::npos);
  }
  // events: the death and the rejoin, and the operator's commands.
  auto events = answer("events 200")["events"];
  std::set<std::string> kinds;
  for (const auto& e : events) {
    if (e["subject"] == "learner-1" || e["kind"] == "command") kinds.insert(e["kind"].get<std::string>());
  }
  CHECK_MESSAGE((kinds.count("death") && kinds.count("rejoin") && kinds.count("command")), events.dump());
  // status carries the goodput ledger: goodput and its badput parts add up to one.
  auto ledger = answer("status")["goodput"];
  double shares = ledger["goodput"].get<double>();
  for (const auto& [part, share] : ledger["badput"].items()) shares += share.get<double>();
  CHECK(std::abs(shares - 1) < 1e-9);
  CHECK(ledger["goodput"].get<double>() > 0);
  CHECK(ledger["badput"]["idle"].get<double>() > 0);  // node-b's slots before it joined
  CHECK(ledger["badput"]["restarting"].get<double>() > 0);
  CHECK(ledger["badput"]["paused"].get<double>() > 0);

  // drain: the run ends cleanly, as if its budget were spent.
  CHECK(answer("drain")["draining"] == true);
  REQUIRE(coordinator.wait(60) == 0);
  CAPTURE(coordinator.all());
  CHECK_MESSAGE(node.wait(30) == 0, node.all());
  CHECK_MESSAGE(node_b.wait(30) == 0, node_b.all());
  auto summary = coordinator.summary();
  CHECK(summary["stopped_by"] == "drain");
  CHECK(summary["goodput"].get<double>() > 0);
  CHECK(summary["badput"]["restarting"].get<double>() > 0);
  CHECK(summary["admin_sessions"]["accepted"].get<int>() == opened);
  CHECK(summary["admin_sessions"]["refused"].get<int>() == 1);
  CHECK(coordinator.err().find("admin-horse") == std::string::npos);
}

TEST_CASE("a coordinator without an admin token refuses every admin session") {
  Scratch s("authz-no-admin");
  const int port = free_port();
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=0"}), s.dir);
  await_listening(coordinator);
  Process console("console", {"console", "127.0.0.1:" + std::to_string(port), "-c", "status", "--admin-token-file",
                              s.token.string()},
                  s.dir);
  CHECK(console.wait(30) == 3);
  CHECK(console.err().find("no admin token") != std::string::npos);
  coordinator.kill(SIGTERM);
  REQUIRE(coordinator.wait(60) == 0);
  CHECK(coordinator.summary()["admin_sessions"]["refused"].get<int>() == 1);
}

TEST_CASE("kill node: the console SIGKILLs the node that runs a learner and when started again its learners rejoin") {
  Scratch s("authz-kill-node");
  const auto admin_token = s.dir / "admin-token";
  std::ofstream(admin_token) << "admin-horse-battery-staple-0123456789\n";
  chmod(admin_token.c_str(), 0600);
  const int port = free_port();
  auto run = start_two_learner_run(s, port, {"train.max_seconds=0"}, {"--admin-token-file", admin_token.string()});
  const std::string target = "127.0.0.1:" + std::to_string(port);
  auto answer = [&](const std::string& command) { return console_answer(s.dir, target, command, admin_token); };
  {
    auto unknown = console_command(s.dir, target, "kill node node-z", admin_token);
    CHECK(unknown.code == 1);
    CHECK(unknown.err.find("node-z") != std::string::npos);
  }
  CHECK(answer("kill node node-a")["sent"][0]["node"] == "node-a");
  CHECK(run.node->wait(30) == 128 + SIGKILL);  // as abrupt as a crash: no handler ran
  CHECK(run.node->err().find("killed by an operator (kill node): SIGKILL") != std::string::npos);
  CHECK_MESSAGE(wait_until([&] { return answer("nodes")["nodes"].empty(); }, 30), run.coordinator->all());
  const uint64_t version_at_kill = answer("status")["committed_version"].get<uint64_t>();

  // Started again, the node gets its slots back and its learners contribute to new versions.
  Process again("node-a-again", node_args(s, port, "node-a"), s.dir);
  nlohmann::json status;
  CHECK_MESSAGE(wait_until([&] {
                  status = answer("status");
                  return status["learners_alive"] == 2 && status["committed_version"].get<uint64_t>() > version_at_kill + 2;
                }, 90),
                status.dump() << again.all());
  auto audit = answer("audit 10")["audit"];
  bool audited = false;
  for (const auto& e : audit) audited |= e["entry"]["command"].value("verb", "") == "kill_node";
  CHECK(audited);

  // The admin actor answers only the session key the gateway issued: a made-up key is refused even
  // by a peer that opened a session with the admin token.
  {
    Client client;
    auto gateway = client.connect(port);
    caf::scoped_actor self{*client.system};
    caf::actor admin;
    self->request(gateway, std::chrono::seconds(5), adminjoin_atom::value, read_file(admin_token).substr(0, 37))
        .receive([&](bool ok, std::string&, std::string& key, caf::actor& handle) {
                   CHECK(ok);
                   CHECK(key.size() == 32);
                   admin = handle;
                 },
                 [&](caf::error& e) { FAIL("admin join failed: " << client.system->render(e)); });
    REQUIRE(admin);
    auto command = Outbox("console").wrap(messages::AdminCommand{1, messages::AdminVerb::kill_node, 0, 0, "", "", "node-a"});
    REQUIRE(command.ok());
    CHECK_FALSE(answered(client, admin, admin_atom::value, std::string(32, '0'), std::move(*command)));
  }
  CHECK(again.running());  // the forged kill did nothing
  run.coordinator->kill(SIGTERM);
  REQUIRE(run.coordinator->wait(60) == 0);
  CHECK_MESSAGE(again.wait(30) == 0, again.all());
  CHECK(refused(run.coordinator->summary(), "wrong_key") == 1);
  CHECK(run.coordinator->err().find("admin refused a 'admin_command' message: wrong_key") != std::string::npos);
}

namespace {
using answer_atom = caf::atom_constant<caf::atom("answer")>;
}  // namespace

TEST_CASE("a forged coordinator cannot steer a node: stop and control and deliver and init with its own keys are refused") {
  Scratch s("authz-forged");
  // An impostor where the node looks for its coordinator: it learns the node's watcher from the join
  // request (the handle every join carries) and tries the coordinator's messages with made-up keys
  // before it answers, one second later, with a refusal.
  Client impostor;
  auto gateway = impostor.system->spawn([](caf::event_based_actor* self) -> caf::behavior {
    using Reply = caf::typed_response_promise<WireBytes, std::string, std::string, std::string, int32_t, caf::actor,
                                              std::string>;
    auto pending = std::make_shared<std::vector<Reply>>();
    return {
        [=](nodejoin_atom, WireBytes&, int32_t, int32_t, caf::actor& watcher) {
          const std::string made_up(32, 'f');
          self->send(watcher, stop_atom::value, made_up);
          Outbox outbox("impostor");
          auto control = outbox.wrap(messages::LearnerControl{0, messages::ControlAction::kill_node, "node-a"});
          REQUIRE(control.ok());
          self->send(watcher, control_atom::value, made_up, std::move(*control));
          auto heartbeat = outbox.wrap(messages::Heartbeat{"learner-0", 1, 1.0});
          REQUIRE(heartbeat.ok());
          self->send(watcher, deliver_atom::value, made_up, syncer_name(), watcher, std::move(*heartbeat));
          self->send(watcher, init_atom::value, made_up, made_up, caf::actor{}, std::string("impostor"), caf::actor{},
                     caf::actor{}, caf::actor{});
          pending->push_back(self->make_response_promise<WireBytes, std::string, std::string, std::string, int32_t,
                                                         caf::actor, std::string>());
          self->delayed_send(self, std::chrono::seconds(1), answer_atom::value);
        },
        [=](answer_atom) {
          messages::Welcome refusal{0, 0, false, "unauthenticated: impostor"};
          refusal.refusal = messages::JoinRefusal::unauthenticated;
          auto bytes = Outbox("impostor").wrap(refusal);
          const std::string none;
          for (auto& reply : *pending) {
            reply.deliver(bytes ? *bytes : WireBytes{}, none, none, none, int32_t{-1}, caf::actor{}, none);
          }
          pending->clear();
        },
    };
  });
  auto port = impostor.system->middleman().publish(gateway, 0, "127.0.0.1", true);
  REQUIRE_MESSAGE(port, impostor.system->render(port.error()));
  Process node("node-a", node_args(s, *port, "node-a"), s.dir);
  CHECK_MESSAGE(node.wait(60) == 3, node.all());  // refused: it never joined, it never obeyed
  const std::string err = node.err();
  CAPTURE(err);
  for (const char* kind : {"stop", "control", "deliver", "init"}) {
    CAPTURE(kind);
    CHECK(err.find(std::string("node watcher refused a '") + kind + "' message: wrong_key") != std::string::npos);
  }
  CHECK(err.find("killed by an operator") == std::string::npos);
  CHECK(err.find("the coordinator refused this node: unauthenticated: impostor") != std::string::npos);
  caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
}
