#include "messages/wire_convert.hpp"

#include <string>
#include <type_traits>

namespace archipelago::messages::detail {
namespace {

// Below this size referencing an external segment costs more (segment table entry, pointer
// bookkeeping) than copying.
constexpr size_t kReferencePayloadFrom = 4096;

capnp::Text::Reader text(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }
std::string string(capnp::Text::Reader t) { return std::string(t.begin(), t.size()); }

void write_chunk(capnp::MessageBuilder& builder, wire::TensorChunk::Builder out,
                 const TensorChunk& chunk, const ByteView** external) {
  out.setCodec(static_cast<wire::Codec>(chunk.codec));
  out.setElementCount(chunk.element_count);
  out.setTotalBytes(chunk.total_bytes);
  out.setChunkIndex(chunk.chunk_index);
  out.setChunkCount(chunk.chunk_count);
  out.setChecksum(chunk.checksum);
  const ByteView& payload = chunk.payload;
  const bool aligned = reinterpret_cast<uintptr_t>(payload.data) % 8 == 0;
  if (aligned && payload.size >= kReferencePayloadFrom) {
    auto orphan = builder.getOrphanage().referenceExternalData(
        capnp::Data::Reader(payload.data, payload.size));
    out.adoptPayload(kj::mv(orphan));
    *external = &payload;
  } else {
    out.setPayload(capnp::Data::Reader(payload.data, payload.size));
  }
}

Expected<TensorChunk> read_chunk(wire::TensorChunk::Reader in,
                                 const std::shared_ptr<const void>& owner) {
  const auto raw_codec = static_cast<uint32_t>(in.getCodec());
  if (!is_known_codec(raw_codec)) {
    return make_error(ErrorCode::unknown_type, "codec " + std::to_string(raw_codec));
  }
  TensorChunk chunk;
  chunk.codec = static_cast<Codec>(raw_codec);
  chunk.element_count = in.getElementCount();
  chunk.total_bytes = in.getTotalBytes();
  chunk.chunk_index = in.getChunkIndex();
  chunk.chunk_count = in.getChunkCount();
  chunk.checksum = in.getChecksum();
  auto payload = in.getPayload();
  chunk.payload = ByteView{payload.begin(), payload.size(), owner};
  return chunk;
}

}  // namespace

void write_body(capnp::MessageBuilder& builder, wire::Envelope::Body::Builder body,
                const Message& message, const ByteView** external) {
  std::visit(
      [&](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, Join>) {
          auto out = body.initJoin();
          out.setLearnerId(text(m.learner_id));
          out.setNode(text(m.node));
          out.setSite(text(m.site));
          out.setDevice(text(m.device));
          out.setSpeedHint(m.speed_hint);
          out.setAuthToken(text(m.auth_token));
          auto digests = out.initHeldDigests(static_cast<unsigned>(m.held_digests.size()));
          for (unsigned i = 0; i < m.held_digests.size(); ++i) digests.set(i, m.held_digests[i]);
        } else if constexpr (std::is_same_v<T, Welcome>) {
          auto out = body.initWelcome();
          out.setVersion(m.version);
          out.setFragmentCount(m.fragment_count);
          out.setAccepted(m.accepted);
          out.setReason(text(m.reason));
          auto held = out.initHeldFragments(static_cast<unsigned>(m.held_fragments.size()));
          for (unsigned i = 0; i < m.held_fragments.size(); ++i) held.set(i, m.held_fragments[i]);
          auto versions = out.initFragmentVersions(static_cast<unsigned>(m.fragment_versions.size()));
          for (unsigned i = 0; i < m.fragment_versions.size(); ++i) versions.set(i, m.fragment_versions[i]);
          out.setRefusal(static_cast<wire::JoinRefusal>(m.refusal));
          auto until = out.initReceivedUntil(static_cast<unsigned>(m.received_until.size()));
          for (unsigned i = 0; i < m.received_until.size(); ++i) until.set(i, m.received_until[i]);
        } else if constexpr (std::is_same_v<T, FragmentUpdate>) {
          auto out = body.initFragmentUpdate();
          out.setLearnerId(text(m.learner_id));
          out.setFragmentId(m.fragment_id);
          out.setBaseVersion(m.base_version);
          out.setInnerSteps(m.inner_steps);
          out.setTokens(m.tokens);
          out.setTrainLoss(m.train_loss);
          out.setTokensPerSec(m.tokens_per_sec);
          out.setRound(m.round);
          out.setFromStep(m.from_step);
          out.setToStep(m.to_step);
          out.setComputeSeconds(m.compute_seconds);
          write_chunk(builder, out.initChunk(), m.chunk, external);
        } else if constexpr (std::is_same_v<T, GlobalFragment>) {
          auto out = body.initGlobalFragment();
          out.setFragmentId(m.fragment_id);
          out.setVersion(m.version);
          out.setFastestTokensPerSec(m.fastest_tokens_per_sec);
          out.setDeltaBase(m.delta_base);
          out.setUplinkCodecSet(m.uplink_codec.has_value());
          if (m.uplink_codec) out.setUplinkCodec(static_cast<wire::Codec>(*m.uplink_codec));
          auto epochs = out.initSchedule(static_cast<unsigned>(m.schedule.size()));
          for (unsigned e = 0; e < m.schedule.size(); ++e) {
            epochs[e].setFromStep(m.schedule[e].from_step);
            epochs[e].setInnerSteps(m.schedule[e].inner_steps);
          }
          write_chunk(builder, out.initChunk(), m.chunk, external);
        } else if constexpr (std::is_same_v<T, Heartbeat>) {
          auto out = body.initHeartbeat();
          out.setLearnerId(text(m.learner_id));
          out.setStep(m.step);
          out.setTokensPerSec(m.tokens_per_sec);
          out.setNonfiniteRecoveries(m.nonfinite_recoveries);
          out.setIncarnation(m.incarnation);
          out.setAliveSeconds(m.alive_seconds);
          out.setRecoverySeconds(m.recovery_seconds);
          out.setComputeSeconds(m.compute_seconds);
          out.setWaitSeconds(m.wait_seconds);
          out.setPausedSeconds(m.paused_seconds);
          out.setPaused(m.paused);
          out.setThrottledSeconds(m.throttled_seconds);
          out.setOverheadSeconds(m.overhead_seconds);
          out.setSentComputeSeconds(m.sent_compute_seconds);
          out.setUnsentComputeSeconds(m.unsent_compute_seconds);
          out.setDroppedComputeSeconds(m.dropped_compute_seconds);
          out.setRestoredComputeSeconds(m.restored_compute_seconds);
          out.setTrainLoss(m.train_loss);
        } else if constexpr (std::is_same_v<T, SlotReport>) {
          auto out = body.initSlotReport();
          out.setLearnerId(text(m.learner_id));
          out.setState(static_cast<wire::SlotState>(m.state));
          out.setIncarnation(m.incarnation);
          out.setRestarts(m.restarts);
          out.setReporter(m.reporter);
          out.setLifetimeSeconds(m.lifetime_seconds);
          out.setAliveSeconds(m.alive_seconds);
          out.setRecoverySeconds(m.recovery_seconds);
          out.setComputeSeconds(m.compute_seconds);
          out.setWaitSeconds(m.wait_seconds);
          out.setPausedSeconds(m.paused_seconds);
          out.setRestartingSeconds(m.restarting_seconds);
          out.setThrottledSeconds(m.throttled_seconds);
          out.setOverheadSeconds(m.overhead_seconds);
          out.setSentComputeSeconds(m.sent_compute_seconds);
          out.setHeldComputeSeconds(m.held_compute_seconds);
          out.setLeftComputeSeconds(m.left_compute_seconds);
          out.setIdleSeconds(m.idle_seconds);
        } else if constexpr (std::is_same_v<T, LearnerControl>) {
          auto out = body.initLearnerControl();
          out.setRequestId(m.request_id);
          out.setAction(static_cast<wire::ControlAction>(m.action));
          out.setLearnerId(text(m.learner_id));
          out.setFactor(m.factor);
        } else if constexpr (std::is_same_v<T, Persist>) {
          auto out = body.initPersist();
          out.setVersion(m.version);
          out.setFragmentId(m.fragment_id);
          out.setKind(static_cast<wire::PersistKind>(m.kind));
          write_chunk(builder, out.initChunk(), m.chunk, external);
          out.setManifestJson(text(m.manifest_json));
          out.setTicket(m.ticket);
        } else if constexpr (std::is_same_v<T, Persisted>) {
          auto out = body.initPersisted();
          out.setVersion(m.version);
          out.setOk(m.ok);
          out.setReason(text(m.reason));
          out.setTicket(m.ticket);
        } else if constexpr (std::is_same_v<T, Leave>) {
          auto out = body.initLeave();
          out.setLearnerId(text(m.learner_id));
          out.setReason(text(m.reason));
          out.setCode(static_cast<wire::LeaveCode>(m.code));
        } else if constexpr (std::is_same_v<T, Fetch>) {
          auto out = body.initFetch();
          out.setLearnerId(text(m.learner_id));
          auto digests = out.initHeldDigests(static_cast<unsigned>(m.held_digests.size()));
          for (unsigned i = 0; i < m.held_digests.size(); ++i) digests.set(i, m.held_digests[i]);
        } else if constexpr (std::is_same_v<T, Restore>) {
          body.initRestore().setRequestId(m.request_id);
        } else if constexpr (std::is_same_v<T, AdminCommand>) {
          auto out = body.initAdminCommand();
          out.setRequestId(m.request_id);
          out.setVerb(static_cast<wire::AdminVerb>(m.verb));
          out.setVersion(m.version);
          out.setCount(m.count);
          out.setKey(text(m.key));
          out.setValue(text(m.value));
          out.setTarget(text(m.target));
        } else if constexpr (std::is_same_v<T, CommitEnd>) {
          auto out = body.initCommitEnd();
          out.setVersion(m.version);
          out.setManifestJson(text(m.manifest_json));
          out.setTicket(m.ticket);
        } else if constexpr (std::is_same_v<T, AdminRequest>) {
          auto out = body.initAdminRequest();
          out.setRequestId(m.request_id);
          out.setCommand(text(m.command));
          auto args = out.initArgs(static_cast<unsigned>(m.args.size()));
          for (unsigned i = 0; i < m.args.size(); ++i) args.set(i, text(m.args[i]));
        } else {
          static_assert(std::is_same_v<T, AdminReply>, "every Message alternative is written");
          auto out = body.initAdminReply();
          out.setRequestId(m.request_id);
          out.setOk(m.ok);
          out.setText(text(m.text));
          out.setJson(text(m.json));
        }
      },
      message);
}

Expected<Message> read_body(wire::Envelope::Body::Reader body,
                            const std::shared_ptr<const void>& owner) {
  using Which = wire::Envelope::Body::Which;
  switch (body.which()) {
    case Which::JOIN: {
      auto in = body.getJoin();
      Join join;
      join.learner_id = string(in.getLearnerId());
      join.node = string(in.getNode());
      join.site = string(in.getSite());
      join.device = string(in.getDevice());
      join.speed_hint = in.getSpeedHint();
      join.auth_token = string(in.getAuthToken());
      for (auto d : in.getHeldDigests()) join.held_digests.push_back(d);
      return Message(std::move(join));
    }
    case Which::WELCOME: {
      auto in = body.getWelcome();
      Welcome welcome;
      welcome.version = in.getVersion();
      welcome.fragment_count = in.getFragmentCount();
      welcome.accepted = in.getAccepted();
      welcome.reason = string(in.getReason());
      for (auto f : in.getHeldFragments()) welcome.held_fragments.push_back(f);
      for (auto v : in.getFragmentVersions()) welcome.fragment_versions.push_back(v);
      for (auto s : in.getReceivedUntil()) welcome.received_until.push_back(s);
      welcome.refusal = static_cast<JoinRefusal>(in.getRefusal());
      return Message(std::move(welcome));
    }
    case Which::FRAGMENT_UPDATE: {
      auto in = body.getFragmentUpdate();
      auto chunk = read_chunk(in.getChunk(), owner);
      if (!chunk) return chunk.error();
      return Message(FragmentUpdate{string(in.getLearnerId()), in.getFragmentId(),
                                    in.getBaseVersion(), in.getInnerSteps(), in.getTokens(),
                                    in.getTrainLoss(), std::move(*chunk), in.getTokensPerSec(), in.getRound(),
                                    in.getFromStep(), in.getToStep(), in.getComputeSeconds()});
    }
    case Which::GLOBAL_FRAGMENT: {
      auto in = body.getGlobalFragment();
      auto chunk = read_chunk(in.getChunk(), owner);
      if (!chunk) return chunk.error();
      GlobalFragment global{in.getFragmentId(), in.getVersion(), std::move(*chunk), in.getFastestTokensPerSec(),
                            in.getDeltaBase()};
      if (in.getUplinkCodecSet()) {
        const auto raw = static_cast<uint32_t>(in.getUplinkCodec());
        if (!is_known_codec(raw)) return make_error(ErrorCode::unknown_type, "uplink codec " + std::to_string(raw));
        global.uplink_codec = static_cast<Codec>(raw);
      }
      for (auto e : in.getSchedule()) global.schedule.push_back({e.getFromStep(), e.getInnerSteps()});
      return Message(std::move(global));
    }
    case Which::HEARTBEAT: {
      auto in = body.getHeartbeat();
      return Message(Heartbeat{string(in.getLearnerId()), in.getStep(), in.getTokensPerSec(),
                               in.getNonfiniteRecoveries(), in.getIncarnation(), in.getAliveSeconds(),
                               in.getRecoverySeconds(), in.getComputeSeconds(), in.getWaitSeconds(),
                               in.getPausedSeconds(), in.getPaused(), in.getThrottledSeconds(),
                               in.getOverheadSeconds(), in.getSentComputeSeconds(), in.getUnsentComputeSeconds(),
                               in.getDroppedComputeSeconds(), in.getRestoredComputeSeconds(),
                               in.getTrainLoss()});
    }
    case Which::SLOT_REPORT: {
      auto in = body.getSlotReport();
      return Message(SlotReport{string(in.getLearnerId()), static_cast<SlotState>(in.getState()), in.getIncarnation(),
                                in.getRestarts(), in.getReporter(), in.getLifetimeSeconds(), in.getAliveSeconds(),
                                in.getRecoverySeconds(), in.getComputeSeconds(), in.getWaitSeconds(),
                                in.getPausedSeconds(), in.getRestartingSeconds(), in.getThrottledSeconds(),
                                in.getOverheadSeconds(), in.getSentComputeSeconds(), in.getHeldComputeSeconds(),
                                in.getLeftComputeSeconds(), in.getIdleSeconds()});
    }
    case Which::LEARNER_CONTROL: {
      auto in = body.getLearnerControl();
      return Message(LearnerControl{in.getRequestId(), static_cast<ControlAction>(in.getAction()),
                                    string(in.getLearnerId()), in.getFactor()});
    }
    case Which::PERSIST: {
      auto in = body.getPersist();
      const auto raw_kind = static_cast<uint32_t>(in.getKind());
      if (raw_kind > static_cast<uint32_t>(PersistKind::outer_momentum)) {
        return make_error(ErrorCode::unknown_type, "persist kind " + std::to_string(raw_kind));
      }
      auto chunk = read_chunk(in.getChunk(), owner);
      if (!chunk) return chunk.error();
      return Message(Persist{in.getVersion(), in.getFragmentId(), static_cast<PersistKind>(raw_kind),
                             std::move(*chunk), string(in.getManifestJson()), in.getTicket()});
    }
    case Which::PERSISTED: {
      auto in = body.getPersisted();
      return Message(Persisted{in.getVersion(), in.getOk(), string(in.getReason()), in.getTicket()});
    }
    case Which::LEAVE: {
      auto in = body.getLeave();
      return Message(Leave{string(in.getLearnerId()), string(in.getReason()), static_cast<LeaveCode>(in.getCode())});
    }
    case Which::FETCH: {
      auto in = body.getFetch();
      Fetch fetch;
      fetch.learner_id = string(in.getLearnerId());
      for (auto d : in.getHeldDigests()) fetch.held_digests.push_back(d);
      return Message(std::move(fetch));
    }
    case Which::RESTORE:
      return Message(Restore{body.getRestore().getRequestId()});
    case Which::ADMIN_COMMAND: {
      auto in = body.getAdminCommand();
      return Message(AdminCommand{in.getRequestId(), static_cast<AdminVerb>(in.getVerb()), in.getVersion(), in.getCount(),
                                  string(in.getKey()), string(in.getValue()), string(in.getTarget())});
    }
    case Which::COMMIT_END: {
      auto in = body.getCommitEnd();
      return Message(CommitEnd{in.getVersion(), string(in.getManifestJson()), in.getTicket()});
    }
    case Which::ADMIN_REQUEST: {
      auto in = body.getAdminRequest();
      AdminRequest request{in.getRequestId(), string(in.getCommand()), {}};
      for (auto arg : in.getArgs()) request.args.push_back(string(arg));
      return Message(std::move(request));
    }
    case Which::ADMIN_REPLY: {
      auto in = body.getAdminReply();
      return Message(AdminReply{in.getRequestId(), in.getOk(), string(in.getText()),
                                string(in.getJson())});
    }
  }
  return make_error(ErrorCode::unknown_type,
                    "message tag " + std::to_string(static_cast<unsigned>(body.which())));
}

}  // namespace archipelago::messages::detail
