"""Protocol registry: a protocol turns a RunContext into a final allocation. One module, one entry."""

from __future__ import annotations

from debate.protocols import paper

PROTOCOLS = {
    "paper": paper.run,
}
