"""The ``--judge-*`` flags and the ``[judge]`` table of run.toml."""

from __future__ import annotations

from dataclasses import dataclass

from rollyard.options import at_least, non_negative, option, positive

#: Flag prefix and run.toml table of :class:`JudgeOptions`.
PREFIX = "judge"


@dataclass(frozen=True)
class JudgeOptions:
    """Which endpoint and model judge, with what template, how many at once and how
    patiently."""

    base_url: str | None = option(
        None, metavar="URL",
        help="OpenAI-compatible API root of the judge, e.g. http://host:8000/v1 (required "
             "when the judge reward is used)")
    model: str | None = option(None, metavar="NAME",
                               help="model name sent to the judge endpoint (required)")
    api_key_env: str | None = option(
        None, metavar="VAR",
        help="environment variable holding the judge's API key (sent as a Bearer token)")
    template: str | None = option(
        None, metavar="FILE",
        help="judge prompt template with {prompt}, {response} and {reference} fields "
             "(default: the built-in one asking for a last line 'SCORE: <0..1>')")
    concurrency: int = option(4, metavar="N", check=at_least(1),
                              help="judge requests in flight per rollout worker")
    timeout: float = option(60.0, metavar="S", check=positive,
                            help="seconds per judge request")
    retries: int = option(3, metavar="N", check=at_least(0),
                          help="retries of a judge request that timed out, could not connect "
                               "or got HTTP 429/5xx (exponential backoff with jitter)")
    max_tokens: int = option(256, metavar="N", check=at_least(1),
                             help="most tokens of the judge's reply")
    temperature: float = option(0.0, metavar="T", check=non_negative,
                                help="sampling temperature of the judge")
    cache_size: int = option(4096, metavar="N", check=at_least(0),
                             help="judgements kept per rollout worker, keyed by (prompt, "
                                  "response, template) (0: no cache)")
