import os
from pathlib import Path

import pytest
from filter_fixtures import ALL_REDACT, make_pipeline, write_policy

from filters import Action, Direction, FilterContext, PolicyError, parse_policy

RULES = """
default_action = "redact"
[actions]
payment_card = "mask"
email = "flag"

[[rules]]
detectors = ["payment_card"]
direction = "request"
roles = ["risk-analyst"]
models = ["risk-*"]
action = "flag"

[[rules]]
detectors = ["email"]
direction = "response"
action = "block"
"""
NAMES = ("payment_card", "email", "iban")


def test_base_actions_and_default() -> None:
    policy = parse_policy(RULES)
    actions = policy.actions_for(Direction.REQUEST, ("user",), "qwen", NAMES)
    assert actions == {"payment_card": Action.MASK, "email": Action.FLAG, "iban": Action.REDACT}


def test_rule_needs_role_model_and_direction_together() -> None:
    policy = parse_policy(RULES)
    assert (
        policy.actions_for(Direction.REQUEST, ("risk-analyst",), "risk-7b", NAMES)["payment_card"]
        is Action.FLAG
    )
    assert (
        policy.actions_for(Direction.REQUEST, ("risk-analyst",), "qwen", NAMES)["payment_card"] is Action.MASK
    )
    assert policy.actions_for(Direction.REQUEST, ("user",), "risk-7b", NAMES)["payment_card"] is Action.MASK
    assert (
        policy.actions_for(Direction.RESPONSE, ("risk-analyst",), "risk-7b", NAMES)["payment_card"]
        is Action.MASK
    )


def test_model_globs_are_anchored() -> None:
    policy = parse_policy(RULES.replace('"risk-*"', '"risk-7b"'))
    actions = policy.actions_for(Direction.REQUEST, ("risk-analyst",), "risk-7b-uncensored", NAMES)
    assert actions["payment_card"] is Action.MASK


def test_direction_rule() -> None:
    policy = parse_policy(RULES)
    assert policy.actions_for(Direction.RESPONSE, (), "m", NAMES)["email"] is Action.BLOCK
    assert policy.actions_for(Direction.REQUEST, (), "m", NAMES)["email"] is Action.FLAG


@pytest.mark.parametrize(
    "body",
    [
        'on_error = "flag"',
        "unknown_key = 1",
        '[actions]\nemail = "shred"',
        '[[rules]]\naction = "block"\ndirection = "up"',
        "not toml =",
    ],
)
def test_invalid_policies_are_rejected(body: str) -> None:
    with pytest.raises(PolicyError):
        parse_policy(body)


def test_pipeline_applies_role_and_model(tmp_path: Path) -> None:
    pipeline = make_pipeline(write_policy(tmp_path, RULES))
    text = "card 4111 1111 1111 1111"
    analyst = pipeline.check_request([text], FilterContext(roles=("risk-analyst",), model="risk-7b"))
    assert analyst.texts == [text]
    other = pipeline.check_request([text], FilterContext(roles=("risk-analyst",), model="qwen"))
    assert other.texts == ["card 4111 **** **** 1111"]


def _touch_later(path: Path, body: str) -> None:
    stat = path.stat()
    path.write_text(body, encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


def test_edit_is_picked_up_after_the_interval_without_restart(tmp_path: Path) -> None:
    now = [0.0]
    policy = write_policy(tmp_path)
    pipeline = make_pipeline(policy, clock=lambda: now[0])
    ctx = FilterContext()
    assert pipeline.check_request(["a@b.com"], ctx).texts == ["[REDACTED:EMAIL]"]
    _touch_later(policy, ALL_REDACT + '[actions]\nemail = "flag"\n')
    assert pipeline.check_request(["a@b.com"], ctx).texts == ["[REDACTED:EMAIL]"]  # interval not over
    now[0] = 1.5
    assert pipeline.check_request(["a@b.com"], ctx).texts == ["a@b.com"]


def test_keyword_list_edit_is_picked_up(tmp_path: Path) -> None:
    now = [0.0]
    policy = write_policy(tmp_path)
    pipeline = make_pipeline(policy, clock=lambda: now[0])
    assert pipeline.check_request(["套现"], FilterContext()).texts == ["套现"]
    _touch_later(tmp_path / "kw.txt", "套现\n")
    now[0] = 2.0
    assert pipeline.check_request(["套现"], FilterContext()).texts == ["[REDACTED:KEYWORD]"]


def test_broken_edit_keeps_previous_policy(tmp_path: Path) -> None:
    now = [0.0]
    policy = write_policy(tmp_path)
    pipeline = make_pipeline(policy, clock=lambda: now[0])
    _touch_later(policy, 'on_error = "flag"\n')
    now[0] = 5.0
    assert pipeline.check_request(["a@b.com"], FilterContext()).texts == ["[REDACTED:EMAIL]"]
    with pytest.raises(PolicyError):
        pipeline.reload()
    assert pipeline.check_request(["a@b.com"], FilterContext()).texts == ["[REDACTED:EMAIL]"]


def test_explicit_reload(tmp_path: Path) -> None:
    policy = write_policy(tmp_path)
    pipeline = make_pipeline(policy, clock=lambda: 0.0)
    policy.write_text(ALL_REDACT + '[actions]\nemail = "off"\n', encoding="utf-8")
    pipeline.reload()
    assert pipeline.check_request(["a@b.com"], FilterContext()).findings == ()
