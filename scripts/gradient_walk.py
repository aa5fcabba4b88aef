#!/usr/bin/env python3
"""Counts how often one pseudo-gradient's walk crosses folders, at a git revision.

The walk is the code a pseudo-gradient passes through from the learner that computes it to
RocksDB and back as a committed global fragment, as the functions called in order (WALK). Each
function is found where it is defined at the revision (a line that starts a definition of that
name in a .cpp file of the source folders), and a crossing is a step whose folder differs from the
step before. The same walk, measured at two revisions, says whether the code a reader follows got
closer together.

Usage: scripts/gradient_walk.py [REV ...]      (default: HEAD)   prints each step and the count
"""
import re
import subprocess
import sys

SOURCE_FOLDERS = ("common", "diloco", "messages", "storage", "training", "net", "sim", "actors", "remote", "run", "apps")

# (what happens, function names: the first one defined at the revision is taken)
WALK = [
    ("learner: an update is due; Δ = θ_ref − θ_local", ["send_update"]),
    ("learner: encode with error feedback", ["ErrorFeedback::encode"]),
    ("learner: cut into chunks, one envelope each", ["Outbox::stream_tensor"]),
    ("  chunk geometry and checksums", ["for_each_chunk"]),
    ("  wrap one chunk", ["Outbox::wrap"]),
    ("  encode the envelope", ["encode"]),
    ("syncer: a message arrives (dispatched to the syncer's handler of its kind)", ["Receiver::dispatch", "handle"]),
    ("  the receiver unwraps it", ["Receiver::receive", "unwrap"]),
    ("  decode the envelope with limits", ["decode"]),
    ("syncer: an update chunk (the receiver takes it: screened by the syncer's hook, then buffered)",
     ["Receiver::take_chunk", "on_update"]),
    ("  reassemble the tensor", ["TensorInbox::add"]),
    ("  reassembler checks the chunk", ["Reassembler::add"]),
    ("  admit the whole update (on_update hands it over)", ["SyncerCore::accept"]),
    ("  credit its work (merge weight)", ["credit_work"]),
    ("  fold it into the running sum", ["SyncerCore::fold_encoded", "fold_encoded"]),
    ("  quantized fold", ["accumulate_quantized"]),
    ("syncer: is a fragment ready (quorum, grace)", ["SyncerCore::ready_fragments"]),
    ("  the merge rule", ["decide_merge"]),
    ("syncer: merge and outer step", ["SyncerCore::stage"]),
    ("syncer: persist the staged fragment", ["send_persist"]),
    ("  chunks of B_p and the outer state", ["Outbox::stream_tensor"]),
    ("  chunk geometry", ["for_each_chunk"]),
    ("  wrap", ["Outbox::wrap"]),
    ("  encode", ["encode"]),
    ("store: a Persist chunk arrives (dispatched to the store's handler of its kind)", ["Receiver::dispatch", "on_persist"]),
    ("  the receiver unwraps it", ["Receiver::receive", "unwrap"]),
    ("  decode", ["decode"]),
    ("  the store takes the chunk, placed in its tensor", ["on_persist"]),
    ("  write the chunk at its place in its tensor's blob file", ["CommitTickets::add_piece", "add_chunk"]),
    ("  the incoming blob", ["IncomingBlob::write_at"]),
    ("store: prepare (hash, sync, stage), on the worker the store actor spawns", ["CommitTickets::prepare", "prepare_ticket"]),
    ("  RocksDB: prepare", ["CheckpointStore::prepare_incoming"]),
    ("store: record the version, carrying fragments", ["CommitTickets::record", "record_ticket"]),
    ("  RocksDB: commit", ["CheckpointStore::commit_prepared"]),
    ("store: answer Persisted", ["reply_persisted"]),
    ("  wrap", ["Outbox::wrap"]),
    ("  encode", ["encode"]),
    ("syncer: Persisted arrives (dispatched to the syncer's handler of its kind)", ["Receiver::dispatch", "handle"]),
    ("  the receiver unwraps it", ["Receiver::receive", "unwrap"]),
    ("  decode", ["decode"]),
    ("  the commit is durable", ["on_persisted"]),
    ("  swap in the staged value", ["SyncerCore::commit_succeeded"]),
    ("syncer: broadcast", ["broadcast"]),
    ("  Q(θ − B) with error feedback", ["encode_broadcast"]),
    ("  the tensor codec", ["encode_tensor"]),
    ("  chunks", ["Outbox::stream_tensor"]),
    ("  chunk geometry", ["for_each_chunk"]),
    ("  wrap", ["Outbox::wrap"]),
    ("  encode", ["encode"]),
    ("learner: a global fragment arrives (dispatched to the learner's handler of its kind)", ["Receiver::dispatch", "on_global"]),
    ("  the receiver unwraps it", ["Receiver::receive", "unwrap"]),
    ("  decode", ["decode"]),
    ("  reassemble", ["TensorInbox::add"]),
    ("  reassembler", ["Reassembler::add"]),
    ("  decode the tensor", ["decode_tensor"]),
    ("  the learner takes the whole fragment", ["on_global"]),
    ("  apply it to the learner's copy of B_p", ["apply_broadcast"]),
    ("  install θ_G against θ_ref", ["install_global"]),
]


def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False).stdout


def definition_file(rev, name):
    """The source file that defines `name` at `rev` (a line starting with a return type or the
    qualified name, in a .cpp of the source folders), or None."""
    short = name.split("::")[-1]
    cls = name.split("::")[0] if "::" in name else None
    pattern = rf"^[A-Za-z].*\b{re.escape(name)}\(" if cls else rf"^[A-Za-z][A-Za-z0-9_:<>,\* &]*[ \*&]{re.escape(short)}\("
    out = git("grep", "-n", "-E", pattern, rev, "--", *[f"{f}/*.cpp" for f in SOURCE_FOLDERS])
    for line in out.splitlines():
        path = line.split(":", 2)[1]
        text = line.split(":", 3)[3] if line.count(":") >= 3 else ""
        if text.rstrip().endswith(";"):
            continue  # a declaration
        return path
    return None


def walk(rev):
    steps = []
    for what, names in WALK:
        found = None
        for name in names:
            path = definition_file(rev, name)
            if path:
                found = (name, path)
                break
        if not found:
            sys.exit(f"{rev}: none of {names} is defined ({what})")
        steps.append((what, found[0], found[1]))
    return steps


def main():
    revs = sys.argv[1:] or ["HEAD"]
    for rev in revs:
        steps = walk(rev)
        crossings = 0
        pairs = {}
        previous = None
        print(f"== {rev} ({git('rev-parse', '--short', rev).strip()})")
        for what, name, path in steps:
            folder = path.split("/")[0]
            crossed = previous is not None and folder != previous
            if crossed:
                crossings += 1
                key = " <-> ".join(sorted((previous, folder)))
                pairs[key] = pairs.get(key, 0) + 1
            print(f"  {'x' if crossed else ' '} {path:40s} {name:34s} {what}")
            previous = folder
        print(f"  {len(steps)} steps, {crossings} folder crossings: " +
              ", ".join(f"{k} {v}" for k, v in sorted(pairs.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
