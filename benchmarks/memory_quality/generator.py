"""A seeded generator of long multi-session agent histories and their answer key.

``generate(seed, people, sessions)`` builds, from ``random.Random(seed)``
alone (same arguments, same dataset, byte for byte):

- people (names, how the user knows them), each with seven slots of facts:
  city, employer, role, project, favourite drink, employee ID, pet. Most
  change over 2023-2025 (moves, new jobs with a new ID and often a new
  title, promotions, reassignments, projects that end), each change on a
  date; the first value holds from some date before 2023.
- the ``history`` stream: sessions in date order where a user tells an agent
  about these people. A fact is introduced, restated in other words now and
  then, and changed ("Ana moved to Porto in March 2024"), a few weeks after
  it happened; an employer change, its new ID and new title come in one turn.
  Around them: hard negatives (a trip to a city, an interview at a company,
  a meeting about another project), past mentions ("Ana used to live in
  Lisbon"), notes about no one, small talk and the agent's replies.
- the ``duplicates`` stream: every fact true at the end said ``repeats``
  ways (distinct paraphrases, in shuffled order), among a few hard negatives.
- questions: ``current`` (each slot's value at the end, history), ``past``
  (a slot's value in a month it held all month, history, asked with
  ``valid_at``), ``paraphrase`` (each fact of the duplicates stream).

``filler(seed, rows)`` makes more histories of other people, for a store of
``rows`` memories around the questioned ones.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from benchmarks.memory_quality import vocabulary as words
from benchmarks.memory_quality.model import (
    Add,
    Dataset,
    Fact,
    Invalidate,
    MemoryKind,
    Message,
    Operation,
    Person,
    Question,
    Session,
)

START = date(2023, 1, 1)
END = date(2025, 12, 31)
FIRST_CHANGE = date(2023, 3, 1)
LAST_CHANGE = date(2025, 10, 31)
MAX_REPEATS = min(len(templates) for templates in words.STATEMENTS.values())
DAY = timedelta(days=1)


@dataclass
class Version:
    """One value of one slot of one person, and when it held."""

    fields: dict[str, str]
    valid_from: date
    valid_to: date | None = None
    ended: bool = False  # stopped holding with no successor right away
    group: str | None = None  # changes told in one turn share a group


@dataclass
class Mention:
    """Something the user will say, on or after ``day``."""

    day: date
    order: int
    person: Person
    kind: str  # intro | change | restate | end
    slot: str
    version: int
    group: str | None = None


@dataclass
class World:
    people: list[Person]
    versions: dict[str, dict[str, list[Version]]]  # person id -> slot -> versions
    sessions: list[Session] = field(default_factory=list)


def generate(seed: int, people: int = 40, sessions: int = 160, repeats: int = 5) -> Dataset:
    """The dataset of ``seed`` at these sizes (see the module docstring)."""
    if not 1 <= repeats <= MAX_REPEATS:
        raise ValueError(f"repeats must be 1..{MAX_REPEATS}")
    rng = random.Random(seed)
    world = history(rng, people, sessions, prefix="")
    duplicates, paraphrases = duplicate_stream(rng, world, repeats)
    facts = [
        Fact(
            id=fact_id(person.id, slot, n),
            person=person.id,
            slot=slot,
            version=n,
            value=display(slot, version.fields),
            valid_from=_moment(version.valid_from),
            valid_to=None if version.valid_to is None else _moment(version.valid_to),
            ended=version.ended,
        )
        for person in world.people
        for slot, versions in world.versions[person.id].items()
        for n, version in enumerate(versions)
    ]
    questions = history_questions(rng, world) + paraphrases
    for number, question in enumerate(questions, 1):
        question.id = f"q{number:05d}"
    return Dataset(
        seed=seed,
        sizes={"people": people, "sessions": sessions, "repeats": repeats},
        people=world.people,
        facts=facts,
        streams={"history": world.sessions, "duplicates": duplicates},
        questions=questions,
    )


def filler(seed: int, rows: int, exclude: Sequence[str] = ()) -> list[Session]:
    """Histories of other people (not named ``exclude``) holding at least ``rows`` memories.

    Their ids start ``f<n>-``, so they never collide with the main history's.
    """
    sessions: list[Session] = []
    stored = 0
    chunk = 0
    while stored < rows:
        rng = random.Random(f"filler-{seed}-{chunk}")
        world = history(rng, 60, 240, prefix=f"f{chunk}-", exclude=exclude)
        sessions += world.sessions
        stored += sum(
            isinstance(op, Add) for s in world.sessions for m in s.messages for op in m.ops
        )
        chunk += 1
    return sessions


def fact_id(person: str, slot: str, version: int) -> str:
    return f"{person}/{slot}/{version}"


def display(slot: str, fields: dict[str, str]) -> str:
    if slot == "pet":
        return f"{fields['pet_name']} ({fields['species']})"
    return fields["company" if slot == "employer" else slot]


# ---------------------------------------------------------------- the world


def history(
    rng: random.Random, people: int, sessions: int, prefix: str, exclude: Sequence[str] = ()
) -> World:
    """People (not named ``exclude``), their facts over time, and the sessions that tell them."""
    if people + len(exclude) > len(words.FIRST_NAMES) * len(words.LAST_NAMES):
        raise ValueError("more people than names")
    if sessions < 1:
        raise ValueError("at least one session")
    names: list[str] = []
    taken = set(exclude)  # only looked up, never iterated: order stays seeded
    # A fact told with a first name alone must name one person: first names
    # are unique in a history while there are enough of them.
    firsts: set[str] = set()
    unique_firsts = people <= len(words.FIRST_NAMES)
    while len(names) < people:
        first, last = rng.choice(words.FIRST_NAMES), rng.choice(words.LAST_NAMES)
        name = f"{first} {last}"
        if name not in taken and not (unique_firsts and first in firsts):
            names.append(name)
            taken.add(name)
            firsts.add(first)
    world = World(
        people=[
            Person(id=f"{prefix}p{n:03d}", name=name, relation=rng.choice(words.RELATIONS))
            for n, name in enumerate(names)
        ],
        versions={},
    )
    for person in world.people:
        world.versions[person.id] = schedule(rng, person.id)
    mentions = plan_mentions(rng, world)
    Narrator(rng, world, prefix).tell(mentions, sessions)
    return world


def schedule(rng: random.Random, person: str) -> dict[str, list[Version]]:
    """Every slot's values over time for one person."""
    since = date(rng.randint(2012, 2022), rng.randint(1, 12), 1)
    jobs = [Version({"company": rng.choice(words.COMPANIES)}, since)]
    ids = [Version({"employee_id": employee_id(rng, jobs[0].fields["company"])}, since)]
    roles = [Version({"role": rng.choice(words.ROLES)}, since)]
    for n, day in enumerate(change_days(rng, rng.choice((0, 1, 1, 2))), 1):
        group = f"{person}/job/{n}"
        company = _other(rng, words.COMPANIES, jobs[-1].fields["company"])
        jobs.append(Version({"company": company}, day, group=group))
        ids.append(Version({"employee_id": employee_id(rng, company)}, day, group=group))
        if rng.random() < 0.6:
            role = _other(rng, words.ROLES, roles[-1].fields["role"])
            roles.append(Version({"role": role}, day, group=group))
    taken = [v.valid_from for v in jobs[1:]]
    for day in change_days(rng, rng.choice((0, 0, 1)), avoid=taken):
        at = bisect.bisect([v.valid_from for v in roles], day)
        role = _other(rng, words.ROLES, roles[at - 1].fields["role"])
        roles.insert(at, Version({"role": role}, day))
    versions = {
        "city": _simple(rng, "city", words.CITIES, rng.choice((0, 1, 1, 2, 3))),
        "employer": jobs,
        "role": roles,
        "project": projects(rng),
        "drink": _simple(rng, "drink", words.DRINKS, rng.choice((0, 0, 1))),
        "employee_id": ids,
        "pet": [Version(pet(rng), date(rng.randint(2012, 2022), rng.randint(1, 12), 1))],
    }
    for slot_versions in versions.values():
        for older, newer in itertools.pairwise(slot_versions):
            if older.valid_to is None:
                older.valid_to = newer.valid_from
    return versions


def change_days(rng: random.Random, count: int, avoid: Sequence[date] = ()) -> list[date]:
    """``count`` dates in 2023-03..2025-10, at least three months apart and from ``avoid``."""
    months = (LAST_CHANGE.year - FIRST_CHANGE.year) * 12 + LAST_CHANGE.month - FIRST_CHANGE.month
    avoided = [(d.year - FIRST_CHANGE.year) * 12 + d.month - FIRST_CHANGE.month for d in avoid]
    for _attempt in range(50):
        picked = sorted(rng.sample(range(months + 1), count))
        spaced = all(b - a >= 3 for a, b in itertools.pairwise(picked))
        if spaced and all(abs(p - a) >= 2 for p in picked for a in avoided):
            break
    else:
        return []
    days = []
    for month in picked:
        year, index = divmod(FIRST_CHANGE.month - 1 + month, 12)
        days.append(date(FIRST_CHANGE.year + year, index + 1, 1) + rng.randint(0, 27) * DAY)
    return days


def projects(rng: random.Random) -> list[Version]:
    """Projects over time; some end weeks before the next begins, the last may end for good."""
    versions = [Version({"project": rng.choice(words.PROJECTS)}, date(2022, rng.randint(1, 12), 1))]
    for day in change_days(rng, rng.choice((1, 1, 2, 2, 3))):
        previous = versions[-1]
        end = day - rng.randint(45, 120) * DAY
        if rng.random() < 0.25 and end >= max(previous.valid_from + 30 * DAY, START + 30 * DAY):
            previous.valid_to, previous.ended = end, True
        project = _other(rng, words.PROJECTS, previous.fields["project"])
        versions.append(Version({"project": project}, day))
    last = versions[-1]
    earliest = max(last.valid_from + 60 * DAY, START + 30 * DAY)
    if rng.random() < 0.15 and earliest < LAST_CHANGE:
        last.valid_to = earliest + rng.randint(0, (LAST_CHANGE - earliest).days) * DAY
        last.ended = True
    return versions


def _simple(rng: random.Random, slot: str, pool: Sequence[str], changes: int) -> list[Version]:
    since = date(rng.randint(2012, 2022), rng.randint(1, 12), 1)
    versions = [Version({slot: rng.choice(pool)}, since)]
    for day in change_days(rng, changes):
        versions.append(Version({slot: _other(rng, pool, versions[-1].fields[slot])}, day))
    return versions


def _other(rng: random.Random, pool: Sequence[str], current: str) -> str:
    return rng.choice([value for value in pool if value != current])


def employee_id(rng: random.Random, company: str) -> str:
    initials = "".join(word[0] for word in company.split()).upper()
    number = rng.randint(1000, 99999)
    shape = rng.randrange(3)
    if shape == 0:
        return f"{initials}-{number:05d}"
    if shape == 1:
        return f"{initials}{number:06d}"
    return f"E-{number % 10000:04d}-{initials}"


def pet(rng: random.Random) -> dict[str, str]:
    return {"species": rng.choice(words.PET_SPECIES), "pet_name": rng.choice(words.PET_NAMES)}


# --------------------------------------------------------------- what is said


def plan_mentions(rng: random.Random, world: World) -> list[Mention]:
    """When each fact is introduced, changed, restated or ended."""
    mentions: list[Mention] = []
    lags: dict[str, int] = {}

    def say(day: date, person: Person, kind: str, slot: str, n: int, group: str | None) -> None:
        mentions.append(Mention(min(day, END), len(mentions), person, kind, slot, n, group))

    for person in world.people:
        for slot, versions in world.versions[person.id].items():
            for n, version in enumerate(versions):
                until = version.valid_to or END
                if n == 0:
                    latest = min(until - DAY, START + 540 * DAY)
                    day = START + rng.randint(0, max(0, (latest - START).days)) * DAY
                else:
                    group = version.group or fact_id(person.id, slot, n)
                    lag = lags.setdefault(group, rng.randint(0, 30))
                    # Told while it still holds (a project may end within weeks).
                    lag = min(lag, (until - version.valid_from).days // 3)
                    day = version.valid_from + lag * DAY
                say(day, person, "intro" if n == 0 else "change", slot, n, version.group)
                window = (until - day).days - 2
                if window > 0:
                    for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 4))):
                        say(day + rng.randint(1, window) * DAY, person, "restate", slot, n, None)
                if version.ended and version.valid_to is not None:
                    say(version.valid_to + rng.randint(0, 20) * DAY, person, "end", slot, n, None)
    return mentions


class Narrator:
    """Turns planned mentions into sessions of messages, with the operations they imply."""

    def __init__(self, rng: random.Random, world: World, prefix: str) -> None:
        self.rng = rng
        self.world = world
        self.prefix = prefix
        # (person, slot) -> version -> keys of memories stating it that are still current
        self.live: dict[tuple[str, str], dict[int, list[str]]] = {}
        self.told_in: dict[tuple[str, str, int], int] = {}  # when a version was first told
        self.clock = datetime.combine(START, time(0), UTC)  # the last message's time

    def tell(self, mentions: list[Mention], count: int) -> None:
        span = (END - START).days
        days = sorted(
            [START, END] + [START + self.rng.randint(0, span) * DAY for _ in range(count - 2)]
        )
        days = days[-count:]
        by_session: list[list[Mention]] = [[] for _ in days]
        for mention in mentions:
            by_session[bisect.bisect_left(days, mention.day)].append(mention)
        for index, (day, planned) in enumerate(zip(days, by_session, strict=True)):
            planned.sort(key=lambda m: (m.day, m.order))
            self.world.sessions.append(self.session(index, day, planned))

    def session(self, index: int, day: date, planned: list[Mention]) -> Session:
        rng = self.rng
        turns: list[list[Mention] | tuple[str, Person | None]] = []
        grouped: dict[str, list[Mention]] = {}
        for mention in planned:
            if mention.group is None:
                turns.append([mention])
            elif mention.group in grouped:
                grouped[mention.group].append(mention)
            else:
                grouped[mention.group] = [mention]
                turns.append(grouped[mention.group])
        present = [m.person for m in planned] or [rng.choice(self.world.people)]
        extras: list[tuple[str, Person | None]] = []
        # About one turn in three around the facts is something else.
        for kind, rate in (("near_miss", 0.25), ("past", 0.06), ("note", 0.1), ("small_talk", 0.1)):
            count = rng.randint(0, 1) + sum(rng.random() < rate for _ in turns)
            person = kind in ("near_miss", "past")
            extras += [(kind, rng.choice(present) if person else None) for _ in range(count)]
        for extra in extras:
            turns.insert(rng.randint(0, len(turns)), extra)
        session_id = f"{self.prefix}s{index + 1:04d}"
        clock = datetime.combine(day, time(rng.randint(8, 20), rng.randint(0, 59)), UTC)
        # Two sessions on one day: the second starts after the first ends.
        clock = max(clock, self.clock + timedelta(minutes=rng.randint(30, 180)))
        started = clock.isoformat()
        messages: list[Message] = []
        for turn in turns:
            message_id = f"{session_id}-m{len(messages) + 1:02d}"
            clock += rng.randint(1, 6) * timedelta(minutes=1)
            message: Message | None
            if isinstance(turn, list):
                message = self.fact_turn(message_id, clock, turn, index)
            else:
                message = self.other_turn(message_id, clock, turn[0], turn[1], index)
            if message is None:
                continue
            messages.append(message)
            if message.ops and rng.random() < 0.5:
                clock += timedelta(minutes=1)
                reply = rng.choice(words.ASSISTANT_REPLIES)
                messages.append(
                    Message(
                        f"{session_id}-m{len(messages) + 1:02d}",
                        "assistant",
                        clock.isoformat(),
                        reply,
                    )
                )
        self.clock = clock
        return Session(session_id, started, messages)

    def fact_turn(
        self, message_id: str, clock: datetime, turn: list[Mention], session: int
    ) -> Message:
        sentences: list[str] = []
        ops: list[Operation] = []
        for mention in turn:
            person, slot, n = mention.person, mention.slot, mention.version
            versions = self.world.versions[person.id][slot]
            version = versions[n]
            live = self.live.setdefault((person.id, slot), {})
            if mention.kind == "end":
                sentence = render(
                    self.rng.choice(words.ENDINGS), person, version.fields, when=version.valid_to
                )
                key = f"{message_id}#{len(ops)}"
                ops.append(Add(key, sentence, "event", clock.isoformat(), about=person.id))
                ended = live.pop(n, [])
                if ended and version.valid_to is not None:
                    ops.append(
                        Invalidate(ended, _moment(version.valid_to), fact_id(person.id, slot, n))
                    )
                sentences.append(sentence)
                continue
            sentence = self.statement(mention, versions)
            key = f"{message_id}#{len(ops)}"
            older = [k for v in sorted(live) if v < n for k in live.pop(v)]
            live.setdefault(n, []).append(key)
            self.told_in.setdefault((person.id, slot, n), session)
            ops.append(
                Add(
                    key,
                    sentence,
                    "fact",
                    _moment(version.valid_from),
                    fact_id(person.id, slot, n),
                    older,
                    about=person.id,
                )
            )
            sentences.append(sentence)
        first = turn[0].person
        wrapper = self.rng.choice(words.WRAPPERS)
        text = render(wrapper, first, {}, s=" ".join(sentences))
        return Message(message_id, "user", clock.isoformat(), text, ops)

    def statement(self, mention: Mention, versions: list[Version]) -> str:
        rng = self.rng
        slot, n = mention.slot, mention.version
        version = versions[n]
        if mention.kind == "intro" and rng.random() < 0.35:
            template = rng.choice(words.SINCE[slot])
        elif mention.kind == "change":
            choices = words.CHANGES[slot]
            if versions[n - 1].ended:  # nothing to move away from
                choices = tuple(t for t in choices if "{old}" not in t) or choices
            template = rng.choice(choices)
        else:
            template = rng.choice(words.STATEMENTS[slot])
        old = display(slot, versions[n - 1].fields) if n else ""
        return render(template, mention.person, version.fields, when=version.valid_from, old=old)

    def other_turn(
        self, message_id: str, clock: datetime, kind: str, person: Person | None, session: int
    ) -> Message | None:
        rng = self.rng
        if kind == "small_talk":
            return Message(message_id, "user", clock.isoformat(), rng.choice(words.SMALL_TALK))
        memory: MemoryKind = "event"
        if kind == "note":
            memory = "note"
            sentence = rng.choice(words.NOTES).format(
                when=_month(START + rng.randint(0, (END - START).days) * DAY),
                weekday=rng.choice(words.WEEKDAYS),
                hour=rng.randint(8, 17),
                room=rng.randint(100, 520),
            )
        elif person is None:
            return None
        elif kind == "past":
            sentence_or_none = self.past_mention(person, session)
            if sentence_or_none is None:
                return None
            sentence = sentence_or_none
        else:
            sentence = self.near_miss(person, clock.date())
        text = rng.choice(words.WRAPPERS[:4]).format(s=sentence)
        about = None if person is None or memory == "note" else person.id
        op = Add(f"{message_id}#0", sentence, memory, clock.isoformat(), about=about)
        return Message(message_id, "user", clock.isoformat(), text, [op])

    def near_miss(self, person: Person, day: date) -> str:
        slot = self.rng.choice(list(words.NEAR_MISSES))
        current = self.world.versions[person.id][slot][0].fields
        for version in self.world.versions[person.id][slot]:
            if version.valid_from <= day:
                current = version.fields
        fields = dict(current)
        while display(slot, fields) == display(slot, current):
            fields = random_value(self.rng, slot)
        return render(self.rng.choice(words.NEAR_MISSES[slot]), person, fields)

    def past_mention(self, person: Person, session: int) -> str | None:
        """A value the user already told us was replaced, said as the past."""
        candidates = [
            (slot, versions[n].fields)
            for slot in words.PAST_MENTIONS
            for versions in (self.world.versions[person.id][slot],)
            for n in range(len(versions) - 1)
            if self.told_in.get((person.id, slot, n + 1), session) < session
        ]
        if not candidates:
            return None
        slot, fields = self.rng.choice(candidates)
        return render(self.rng.choice(words.PAST_MENTIONS[slot]), person, fields)


def render(
    template: str,
    person: Person,
    fields: dict[str, str],
    when: date | None = None,
    old: str = "",
    s: str = "",
) -> str:
    values = {
        "name": person.name,
        "first": person.name.split()[0],
        "relation": person.relation,
        "when": "" if when is None else _month(when),
        "year": "" if when is None else str(when.year),
        "old": old,
        "s": s,
        **fields,
    }
    if "company" in fields:
        values["employer"] = fields["company"]
    if "role" in fields:
        values["a_role"] = f"{_article(fields['role'])} {fields['role']}"
    return template.format(**values)


def random_value(rng: random.Random, slot: str) -> dict[str, str]:
    """A value of ``slot`` drawn from the vocabulary, for a hard negative."""
    if slot == "employer":
        return {"company": rng.choice(words.COMPANIES)}
    if slot == "employee_id":
        return {"employee_id": employee_id(rng, rng.choice(words.COMPANIES))}
    if slot == "pet":
        return pet(rng)
    pool = {
        "city": words.CITIES,
        "role": words.ROLES,
        "project": words.PROJECTS,
        "drink": words.DRINKS,
    }[slot]
    return {slot: rng.choice(pool)}


# ---------------------------------------------------------------- questions


def history_questions(rng: random.Random, world: World) -> list[Question]:
    """A current question per slot still held at the end; a past one per slot that changed."""
    questions: list[Question] = []
    for person in world.people:
        for slot, versions in world.versions[person.id].items():
            last = len(versions) - 1
            if not versions[last].ended:
                text = render(rng.choice(words.QUESTIONS_NOW[slot]), person, {})
                questions.append(
                    Question(
                        "",
                        "current",
                        "history",
                        text,
                        fact_id(person.id, slot, last),
                        person.id,
                        slot,
                    )
                )
            if len(versions) < 2:
                continue
            months = {n: full_months(v) for n, v in enumerate(versions)}
            earlier = [n for n in range(last) if months[n]]
            pick = earlier if earlier and rng.random() < 0.75 else [n for n in months if months[n]]
            if not pick:
                continue
            n = rng.choice(pick)
            month = rng.choice(months[n])
            text = render(rng.choice(words.QUESTIONS_THEN[slot]), person, {}, when=month)
            valid_at = datetime.combine(month.replace(day=15), time(12), UTC).isoformat()
            questions.append(
                Question(
                    "",
                    "past",
                    "history",
                    text,
                    fact_id(person.id, slot, n),
                    person.id,
                    slot,
                    valid_at,
                )
            )
    return questions


def full_months(version: Version) -> list[date]:
    """First days of the months of the history the version held from start to end."""
    months = []
    month = START
    until = min(version.valid_to or END, END)
    while month < END:
        following = (month + 32 * DAY).replace(day=1)
        if month >= version.valid_from and following <= until:
            months.append(month)
        month = following
    return months


def duplicate_stream(
    rng: random.Random, world: World, repeats: int
) -> tuple[list[Session], list[Question]]:
    """Every fact true at the end said ``repeats`` different ways, with a question for each."""
    turns: list[tuple[str, Person, str, int]] = []
    questions: list[Question] = []
    for person in world.people:
        for slot, versions in world.versions[person.id].items():
            n = len(versions) - 1
            if versions[n].ended:
                continue
            for template in rng.sample(words.STATEMENTS[slot], repeats):
                turns.append((template, person, slot, n))
            text = render(rng.choice(words.QUESTIONS_NOW[slot]), person, {})
            questions.append(
                Question(
                    "",
                    "paraphrase",
                    "duplicates",
                    text,
                    fact_id(person.id, slot, n),
                    person.id,
                    slot,
                )
            )
        slot = rng.choice(list(words.NEAR_MISSES))
        turns.append((rng.choice(words.NEAR_MISSES[slot]), person, slot, -1))
    rng.shuffle(turns)
    sessions: list[Session] = []
    per_session = 12
    first_day = date(2025, 11, 15)
    count = -(-len(turns) // per_session)
    clock = datetime.combine(first_day, time(0), UTC)
    for index in range(0, len(turns), per_session):
        number = index // per_session
        session_id = f"d{number + 1:04d}"
        day = first_day + number * 45 // count * DAY
        clock = max(clock, datetime.combine(day, time(rng.randint(8, 20)), UTC))
        session = Session(session_id, clock.isoformat(), [])
        for template, person, slot, n in turns[index : index + per_session]:
            clock += rng.randint(1, 6) * timedelta(minutes=1)
            message_id = f"{session_id}-m{len(session.messages) + 1:02d}"
            if n < 0:
                fields = random_value(rng, slot)
                sentence = render(template, person, fields)
                op = Add(f"{message_id}#0", sentence, "event", clock.isoformat(), about=person.id)
            else:
                version = world.versions[person.id][slot][n]
                sentence = render(template, person, version.fields)
                op = Add(
                    f"{message_id}#0",
                    sentence,
                    "fact",
                    _moment(version.valid_from),
                    fact_id(person.id, slot, n),
                    about=person.id,
                )
            session.messages.append(Message(message_id, "user", clock.isoformat(), sentence, [op]))
        sessions.append(session)
    return sessions, questions


def _article(role: str) -> str:
    if role.startswith("HR "):
        return "an"
    if role.startswith("UX "):
        return "a"
    return "an" if role[0].lower() in "aeiou" else "a"


def _month(day: date) -> str:
    return f"{words.MONTHS[day.month - 1]} {day.year}"


def _moment(day: date) -> str:
    return datetime.combine(day, time(0), UTC).isoformat()
