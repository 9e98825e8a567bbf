"""Document search over a per-sample corpus (BM25 via bm25s) with an open-document tool.

The corpus holds look-alike documents (names one vowel apart) with different facts; the
oracle picks the hit from the real search results, so a retrieval miss produces a wrong
answer that the answer check rejects, as with a real teacher.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any, ClassVar

import bm25s

from agentrl.envs.base import Call, Environment, Solver, TaskSpec, ToolBox
from agentrl.envs.verify import answer_spec
from agentrl.envs.world import World
from agentrl.tools.executor import ToolError
from agentrl.tools.vocab import ToolVocab

KINDS = ("Bridge", "Tower", "Museum", "Library", "Station", "Park")
# attribute -> (question, pattern that reads the value back from the document text)
ATTRIBUTES = {
    "built": ("in which year was {t} built", r"built in (\d+)"),
    "height": ("how many meters tall is {t}", r"is (\d+) meters tall"),
    "city": ("in which city is {t}", r"is a \w+ in (\w+)\."),
    "architect": ("who was the architect of {t}", r"architect was (\w+)\."),
}


class DocSearchTools(ToolBox):
    TOOLS = ("search_documents", "open_document")

    def __init__(self, state: dict[str, Any]):
        super().__init__(state)
        self.docs = {d["id"]: d for d in state.get("docs", [])}
        self._retriever: bm25s.BM25 | None = None

    def _index(self) -> bm25s.BM25:
        if self._retriever is None:
            texts = [f"{d['title']} {d['text']}" for d in self.docs.values()]
            self._retriever = bm25s.BM25()
            self._retriever.index(
                bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False
            )
        return self._retriever

    def search_documents(self, query: str) -> list[dict[str, str]]:
        """Search the document collection; returns the 3 best matches with id and title.

        Args:
            query: Keywords to search for.
        """
        if not self.docs:
            return []
        tokens = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
        if not tokens[0]:
            raise ToolError("query has no searchable words")
        k = min(3, len(self.docs))
        ids, scores = self._index().retrieve(tokens, k=k, show_progress=False, n_threads=1)
        docs = list(self.docs.values())
        return [
            {"doc_id": docs[i]["id"], "title": docs[i]["title"]}
            for i, score in zip(ids[0].tolist(), scores[0].tolist(), strict=True)
            if score > 0
        ]

    def open_document(self, doc_id: str) -> str:
        """Return the full text of a document.

        Args:
            doc_id: Document id from a search result, e.g. "d3".
        """
        if doc_id not in self.docs:
            raise ToolError(f"no document with id '{doc_id}'")
        return self.docs[doc_id]["text"]


def _document(world: World, title: str, kind: str) -> tuple[str, dict[str, Any]]:
    facts = {
        "built": world.number(1700, 2020),
        "height": world.number(10, 900),
        "city": world.entity(),
        "architect": world.entity(),
    }
    text = (
        f"{title} is a {kind.lower()} in {facts['city']}. It was built in {facts['built']}. "
        f"It is {facts['height']} meters tall. Its architect was {facts['architect']}."
    )
    return text, facts


class DocSearchEnv(Environment):
    name = "doc_search"
    toolbox = DocSearchTools
    vocab: ClassVar[dict[str, ToolVocab]] = {
        "search_documents": ToolVocab(
            verbs=("search", "find", "retrieve", "query"),
            nouns=("docs", "documents", "articles", "corpus", "pages"),
            args={"query": ("keywords", "text", "q", "search_terms", "terms")},
            descriptions=(
                "Keyword search over the documents.",
                "BM25 retrieval: best matching documents for a query.",
            ),
        ),
        "open_document": ToolVocab(
            verbs=("open", "read", "get", "fetch", "view"),
            nouns=("document", "doc", "article", "page", "text"),
            args={"doc_id": ("id", "document_id", "key", "doc", "ref")},
            descriptions=("Read a document by id.", "Return the text of one document."),
        ),
    }

    def sample(self, rng: random.Random, world: World, difficulty: dict[str, int]) -> TaskSpec:
        kind = rng.choice(KINDS)
        target = world.entity()
        names = [target, world.lookalike(target)] + [
            world.entity() for _ in range(rng.randint(2, 5))
        ]
        docs, facts_of = [], {}
        order = list(range(len(names)))
        rng.shuffle(order)
        for slot, name in zip(order, names, strict=True):
            title = f"{name} {rng.choice(KINDS) if name != target else kind}"
            text, facts = _document(world, title, title.split()[-1])
            docs.append({"id": f"d{slot + 1}", "title": title, "text": text})
            facts_of[title] = facts
        docs.sort(key=lambda d: d["id"])
        title = f"{target} {kind}"
        attribute = rng.choice(list(ATTRIBUTES))
        answer = facts_of[title][attribute]
        return TaskSpec(
            prompt=f"According to the documents, {ATTRIBUTES[attribute][0].format(t=title)}?",
            state={"docs": docs, "title": title, "attribute": attribute},
            verifier=answer_spec(answer),
            needed_tools=["search_documents", "open_document"],
            depth=2,
        )

    def solve(self, task: TaskSpec) -> Solver:
        title = task.state["title"]
        found = yield Call(
            "search_documents",
            {"query": title},
            f"I will search the documents for {title}.",
            (f"open the document about {title}",),
        )
        try:
            hits = json.loads(found)
        except json.JSONDecodeError:
            hits = []
        exact = [h for h in hits if isinstance(h, dict) and h.get("title") == title]
        chosen = (exact or hits or [{"doc_id": "d1"}])[0]["doc_id"]
        text = yield Call(
            "open_document", {"doc_id": chosen}, f"Document {chosen} is about {title}."
        )
        match = re.search(ATTRIBUTES[task.state["attribute"]][1], text)
        return match.group(1) if match else "unknown"
