"""The memory quality benchmark's dataset: seeded, consistent, and answerable by its key."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import numpy as np

from benchmarks.memory_quality.extractor import Capabilities, Extractor, Store
from benchmarks.memory_quality.generator import filler, generate
from benchmarks.memory_quality.model import Add, Dataset, problems, validity
from benchmarks.memory_quality.scoring import Strategy, ask, evaluate
from benchmarks.memory_quality.sweep import sweep
from memsvc import MemoryService, Scope
from memsvc.embedding import HashingEmbedder
from memsvc.memories.dedupe_rule import identifiers

DIGEST = (
    "from benchmarks.memory_quality.generator import generate; "
    "print(generate(11, people=6, sessions=20).digest())"
)


def test_same_seed_same_dataset_in_any_process() -> None:
    first = generate(11, people=6, sessions=20)
    assert generate(11, people=6, sessions=20).to_json() == first.to_json()
    # String hashing differs between processes: nothing may depend on it.
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", DIGEST], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == first.digest()


def test_other_seed_or_size_other_dataset() -> None:
    digests = {
        generate(11, people=6, sessions=20).digest(),
        generate(12, people=6, sessions=20).digest(),
        generate(11, people=7, sessions=20).digest(),
        generate(11, people=6, sessions=21).digest(),
    }
    assert len(digests) == 4


def test_answer_key_is_consistent_at_any_size() -> None:
    for seed, people, sessions in ((1, 1, 1), (2, 3, 2), (3, 10, 40), (4, 40, 160), (5, 60, 30)):
        data = generate(seed, people=people, sessions=sessions)
        assert problems(data) == [], (seed, people, sessions)


def test_the_json_round_trip_keeps_everything() -> None:
    data = generate(5, people=5, sessions=12)
    assert Dataset.from_json(data.to_json()).to_json() == data.to_json()


def test_a_store_applying_the_key_answers_every_question_and_nothing_else() -> None:
    # Replayed perfectly, the memories of a question's slot valid at its
    # moment state exactly its answer: the key holds what the questions need.
    data = generate(8, people=20, sessions=80)
    kinds = Counter(question.kind for question in data.questions)
    assert min(kinds.values()) >= 20, kinds
    for stream in data.streams:
        spans = validity(data, stream)
        adds = [op for _message, op in data.adds(stream) if op.fact]
        for question in (q for q in data.questions if q.stream == stream):
            slot = question.answer.rsplit("/", 1)[0] + "/"
            moment = question.valid_at or "9999"
            held = {
                op.fact
                for op in adds
                if op.fact is not None
                and op.fact.startswith(slot)
                and spans[op.memory][0] <= moment
                and (spans[op.memory][1] is None or moment < spans[op.memory][1])
            }
            assert held == {question.answer}, question


def test_facts_that_change_are_superseded_and_a_third_of_turns_are_not_facts() -> None:
    data = generate(9, people=30, sessions=120)
    adds = [op for _message, op in data.adds("history")]
    kinds = Counter(op.kind for op in adds)
    assert 0.2 < (kinds["event"] + kinds["note"]) / len(adds) < 0.5, kinds
    changed = {q.answer for q in data.questions if q.kind == "current" and q.answer[-2:] != "/0"}
    assert len(changed) > 0.4 * sum(q.kind == "current" for q in data.questions)
    assert sum(bool(op.supersedes) for op in adds) >= len(changed)


def test_each_duplicate_is_said_as_many_different_ways_as_asked() -> None:
    data = generate(10, people=8, sessions=10, repeats=5)
    said: dict[str, set[str]] = {}
    for _message, op in data.adds("duplicates"):
        if op.fact:
            said.setdefault(op.fact, set()).add(op.content)
    asked = {q.answer for q in data.questions if q.kind == "paraphrase"}
    assert set(said) == asked
    assert all(len(contents) == 5 for contents in said.values())


def test_filler_is_other_people_with_ids_of_their_own() -> None:
    data = generate(3, people=5, sessions=10)
    names = [person.name for person in data.people]
    sessions = filler(3, 5_000, names)
    adds = [op for s in sessions for m in s.messages for op in m.ops if isinstance(op, Add)]
    assert len(adds) >= 5_000
    assert all(op.memory.startswith("f") for op in adds)
    assert not any(name in op.content for op in adds for name in names)


async def test_the_plain_store_holds_every_memory_and_scores_its_own_vectors(
    service: MemoryService,
) -> None:
    data = generate(4, people=3, sessions=6)
    ops = [op for s in data.streams["history"] for m in s.messages for op in m.ops]
    contents = [op.content for op in ops if isinstance(op, Add)]
    vectors = dict(
        zip(
            [op.memory for op in ops if isinstance(op, Add)],
            await HashingEmbedder()(contents),
            strict=True,
        )
    )
    caps = Capabilities.of(service)
    extractor = Extractor(service, caps, Store("plain"))
    scope = Scope("bench", "plain-history")
    await extractor.apply(scope, ops, vectors)
    # Same text, same row (memsvc's exact dedupe); every write maps to one.
    assert set(extractor.ids) == set(vectors)
    assert (
        len(set(extractor.ids.values()))
        == len(set(contents))
        == await service.memories.count(scope)
    )
    # Asked with the embedding of a memory stating the answer, the answer comes first.
    questions = [q for q in data.questions if q.stream == "history" and q.kind == "current"]
    stating = {op.fact: op.memory for op in ops if isinstance(op, Add) and op.fact}
    asked = {q.id: np.asarray(vectors[stating[q.answer]]) for q in questions}
    for lens in ("asked", "slot"):
        figures = await evaluate(
            service.memories,
            {"history": scope},
            questions,
            asked,
            Strategy("vector", "plain", "vector", False),
            lens=lens,
        )
        assert figures["current"]["top1"] == 1.0, lens
    # Within its person and slot a question only ever sees that slot's facts.
    for question in questions:
        hits = await ask(
            service.memories, scope, question, asked[question.id], "vector", False, 50, "slot"
        )
        assert hits
        assert {hit.memory.metadata["fact"].rsplit("/", 1)[0] for hit in hits} == {
            f"{question.about}/{question.slot}"
        }


def test_dedupe_sweep_counts_rows_lost_facts_and_wrong_merges() -> None:
    data = generate(6, people=4, sessions=8)
    adds = [op for _message, op in data.adds("duplicates")]
    rng = np.random.default_rng(0)
    vectors = {}
    for op in adds:
        vector = rng.normal(size=16)
        vectors[op.memory] = vector / np.linalg.norm(vector)
    everything, nothing, by_ids, by_ids_nothing, per_slot, _ = sweep(
        data, "duplicates", vectors, (-1.0, 1.01)
    )
    facts = {op.fact for op in adds if op.fact}
    assert (nothing.kept, nothing.facts_lost, nothing.wrong_merges) == (len(adds), 0, 0)
    # Everything merged into the first memory written.
    assert everything.kept == 1
    assert everything.facts_lost == len(facts) - (adds[0].fact is not None)
    assert everything.wrong_merges == sum(op.fact != adds[0].fact for op in adds[1:])
    # With the identifier rule, a write merges only into one holding the same identifiers.
    assert (by_ids_nothing.kept, by_ids_nothing.facts_lost) == (len(adds), 0)
    assert by_ids.kept == len({identifiers(op.content) for op in adds})
    # Within a person's slot the duplicates stream holds one fact: nothing wrong, nothing lost.
    groups = {(op.about, op.fact.split("/")[1] if op.fact else None) for op in adds}
    assert (per_slot.kept, per_slot.facts_lost, per_slot.wrong_merges) == (len(groups), 0, 0)
