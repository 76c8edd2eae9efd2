"""The advisor: a list of rules, each a small function that looks at a trace and names the fix.

A rule takes a ``Context`` (the trace plus the analyses it shares with other rules, computed
once) and returns ``Finding``s: a stable ``rule`` id a script can match on, a one-line
message with the numbers, the evidence (events, time shares, an example stack) and the fix.
Rules come from the TensorBoard plugin, torch's pattern matcher, HTA, and the seed cases none
of them catch; ``RULES`` lists them all and ``advise`` runs them.
"""

from __future__ import annotations

from torchscope.analysis.advisor.base import Context, Finding, Rule
from torchscope.analysis.advisor.rules import RULES
from torchscope.trace.model import Trace

# a finding that measured time is shown from this share of the profiled time on: below it, the
# fix cannot change the run noticeably, and it would crowd out the findings that can
MIN_SHARE = 0.01


def advise(
    trace: Trace, rules: tuple[Rule, ...] = RULES, ctx: Context | None = None, min_share: float = MIN_SHARE
) -> list[Finding]:
    """Run every rule; findings sorted by the share of step time they concern, largest first.

    Findings that measured less than ``min_share`` of the profiled time are left out (pass 0
    to see them all). Pass a ``Context`` to reuse analyses already computed on it (the report does).
    """
    ctx = ctx if ctx is not None and ctx.trace is trace else Context(trace)
    found: list[Finding] = []
    for rule in rules:
        found.extend(f for f in rule(ctx) if f.share is None or f.share >= min_share)
    return sorted(found, key=lambda f: -f.impact)


__all__ = ["MIN_SHARE", "RULES", "Context", "Finding", "Rule", "advise"]
