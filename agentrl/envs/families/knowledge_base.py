"""Knowledge base over a per-sample world of entities and relations: multi-hop questions.

Each sample invents its own people, cities, countries and companies, plus look-alike
entities (one vowel apart) holding different facts, so the answer must come from the
lookups of this episode and careless copying of a name is punished.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar

from agentrl.envs.base import Call, Environment, Solver, TaskSpec, ToolBox, in_order
from agentrl.envs.verify import answer_spec
from agentrl.envs.world import World
from agentrl.tools.executor import ToolError
from agentrl.tools.vocab import ToolVocab

# relation -> (subject type, object type or "number" with its range)
RELATIONS: dict[str, tuple[str, str | tuple[int, int]]] = {
    "birthplace": ("person", "city"),
    "employer": ("person", "company"),
    "age": ("person", (18, 90)),
    "country": ("city", "country"),
    "population": ("city", (1_000, 999_999)),
    "mayor": ("city", "person"),
    "headquarters": ("company", "city"),
    "founding_year": ("company", (1800, 2020)),
    "ceo": ("company", "person"),
    "capital": ("country", "city"),
}
TYPES = ("person", "city", "company", "country")


def relations_of(kind: str, numeric: bool | None = None) -> list[str]:
    out = [r for r, (subject, _) in RELATIONS.items() if subject == kind]
    if numeric is None:
        return out
    return [r for r in out if isinstance(RELATIONS[r][1], tuple) == numeric]


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


class KnowledgeBaseTools(ToolBox):
    TOOLS = ("lookup", "search_entities")

    @property
    def facts(self) -> dict[str, dict[str, Any]]:
        return self.state.get("facts", {})

    def lookup(self, entity: str, relation: str) -> str | int:
        """Look up one fact about an entity in the knowledge base.

        Args:
            entity: Exact name of the entity, e.g. "Korava".
            relation: Relation to read, e.g. "birthplace", "population", "ceo".
        """
        if entity not in self.facts:
            raise ToolError(f"no entity named '{entity}'")
        relation = relation.strip().lower().replace(" ", "_")
        known = {k: v for k, v in self.facts[entity].items() if k != "type"}
        if relation not in known:
            raise ToolError(
                f"'{entity}' has no relation '{relation}'. Known: {', '.join(sorted(known))}"
            )
        return known[relation]

    def search_entities(self, query: str) -> list[str]:
        """Find entity names similar to a query (at most 5).

        Args:
            query: Full or partial entity name.
        """
        q = query.strip().lower()
        scored = sorted((_edit_distance(q, name.lower()), name) for name in self.facts)
        return [name for dist, name in scored if dist <= 2 or q in name.lower()][:5]


def _path(rng: random.Random, hops: int, numeric_end: bool | None) -> tuple[str, list[str]]:
    """A start type and relation path; intermediate hops land on entities."""
    while True:
        start = kind = rng.choice(TYPES)
        path: list[str] = []
        for hop in range(hops):
            options = relations_of(kind, numeric_end if hop == hops - 1 else False)
            if not options:
                break
            path.append(rng.choice(options))
            kind = RELATIONS[path[-1]][1]  # type: ignore[assignment]
        else:
            return start, path


def build_chain(
    rng: random.Random, world: World, hops: int, numeric_end: bool | None
) -> tuple[dict[str, dict[str, Any]], str, list[str], Any]:
    """A world with a relation path of ``hops`` from a start entity, plus look-alikes.

    Returns (facts, start entity, relation path, answer).
    """
    facts: dict[str, dict[str, Any]] = {}

    def new_entity(kind: str) -> str:
        name = world.entity()
        while name in facts:
            name = world.entity()
        facts[name] = {"type": kind}
        return name

    def value_for(relation: str) -> Any:
        target = RELATIONS[relation][1]
        return world.number(*target) if isinstance(target, tuple) else new_entity(target)

    start_kind, relations = _path(rng, hops, numeric_end)
    start = new_entity(start_kind)
    current, path = start, []
    for relation in relations:
        value = value_for(relation)
        facts[current][relation] = value
        path.append(relation)
        current = value
    answer = current
    for entity in list(facts):  # look-alikes hold the same relations with other values
        twin = world.lookalike(entity)
        if twin in facts:
            continue
        facts[twin] = {"type": facts[entity]["type"]}
        for relation in [r for r in facts[entity] if r != "type"]:
            target = RELATIONS[relation][1]
            facts[twin][relation] = (
                world.number(*target) if isinstance(target, tuple) else world.entity()
            )
    for entity in list(facts):  # one extra fact each, so lookups are not trivially unique
        spare = [
            r for r in relations_of(facts[entity]["type"], numeric=True) if r not in facts[entity]
        ]
        if spare:
            relation = rng.choice(spare)
            facts[entity][relation] = world.number(*RELATIONS[relation][1])  # type: ignore[misc]
    return facts, start, path, answer


def question(path: list[str], start: str) -> str:
    phrase = " of the ".join(r.replace("_", " ") for r in reversed(path))
    return f"the {phrase} of {start}"


def relation_steps(path: list[str]) -> tuple[str, ...]:
    """A relation path as the steps a plan names, innermost first.

    >>> relation_steps(["capital", "population"])
    ('the capital of it', 'the population of that')
    """
    return tuple(
        f"the {r.replace('_', ' ')} of {'it' if i == 0 else 'that'}" for i, r in enumerate(path)
    )


def follow_path(start: str, path: list[str], then: tuple[str, ...] = ()) -> Solver:
    """Oracle steps for a relation path: each lookup starts from the last observation;
    ``then`` names the steps after the path (for the plan and the restated task)."""
    current = start
    steps = relation_steps(path)
    for i, relation in enumerate(path):
        current = yield Call(
            "lookup",
            {"entity": current, "relation": relation},
            f"I need the {relation.replace('_', ' ')} of {current}.",
            steps[i + 1 :] + then,
            in_order(question(path[i:], current), *then),
        )
    return current


class KnowledgeBaseEnv(Environment):
    name = "knowledge_base"
    toolbox = KnowledgeBaseTools
    vocab: ClassVar[dict[str, ToolVocab]] = {
        "lookup": ToolVocab(
            verbs=("get", "query", "fetch", "read", "find"),
            nouns=("fact", "relation", "attribute", "kb", "info"),
            args={
                "entity": ("name", "subject", "entity_name", "item", "who"),
                "relation": ("attribute", "property", "field", "predicate", "key"),
            },
            descriptions=(
                "Read the value of a relation for an entity from the knowledge base.",
                "Knowledge graph query: returns one attribute of a named entity.",
            ),
        ),
        "search_entities": ToolVocab(
            verbs=("search", "find", "match", "lookup"),
            nouns=("entities", "names", "entity", "similar_names"),
            args={"query": ("name", "text", "pattern", "q", "partial_name")},
            descriptions=(
                "Fuzzy search over entity names.",
                "Return entity names close to a query.",
            ),
        ),
    }

    def sample(self, rng: random.Random, world: World, difficulty: dict[str, int]) -> TaskSpec:
        facts, start, path, answer = build_chain(rng, world, difficulty["hops"], numeric_end=None)
        return TaskSpec(
            prompt=f"Using the knowledge base, what is {question(path, start)}?",
            state={"facts": facts, "start": start, "path": path},
            verifier=answer_spec(answer),
            needed_tools=["lookup"],
            depth=len(path),
        )

    def solve(self, task: TaskSpec) -> Solver:
        return (yield from follow_path(task.state["start"], task.state["path"]))
