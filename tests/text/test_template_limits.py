"""A chat template is untrusted input: its rendering has a budget of loop iterations and characters.

Each hostile template runs in a child process limited to 2 GiB of address space and a timeout, so that
a rendering that is not bounded fails its test (MemoryError, or the timeout) instead of taking the machine.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")

CHILD = """
import json, sys
from shardstream.errors import ChatTemplateError
from shardstream.testing.text import tiny_tokenizer
from shardstream.text import ChatTemplateTransform, TemplateLimits
tok = tiny_tokenizer()
out = []
for template, limits in json.loads(sys.stdin.read()):
    try:
        t = ChatTemplateTransform(tok, chat_template=template, tokenize=False,
                                  template_limits=TemplateLimits(**limits) if limits else None)
        text = t({"messages": [{"role": "user", "content": "hi"}]})["text"]
        out.append(["ok", len(text)])
    except ChatTemplateError as exc:
        out.append(["ChatTemplateError", str(exc)])
    except BaseException as exc:
        out.append([type(exc).__name__, str(exc)[:200]])
print(json.dumps(out))
"""


def render_bounded(cases: list) -> list:
    """``[kind, text length or message]`` for each ``(template, limits)`` of ``cases``, rendered in a child
    process that may not map more than 2 GiB nor run more than 60 s."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    try:
        done = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(cases), capture_output=True,
                              text=True, timeout=60, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        pytest.fail("rendering the templates ran past the 60 s guard: a rendering is not bounded")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


HOSTILE = {
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "a huge repetition": "{{ 'x' * 10**10 }}",
    "a huge padding": "{{ 'x'.center(10**10) }}{{ 'x'|center(10**10) }}",
    "a huge power": "{{ 2 ** (10**10) }}",
    "doubling by ~": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "doubling by +": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
    "a replace that squares": "{% set s = 'x' * 100000 %}{{ s.replace('x', s) }}",
    "a join of many copies": "{% set s = 'x' * 1000000 %}{{ ([s] * 1000)|join }}",
    "a huge width": "{{ '%10000000000s' % 'x' }}{{ '{:>10000000000}'.format('x') }}",
    "a huge indent": "{{ ('\n' * 100000)|indent(100000) }}",
    "macros that fan out": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
    "loops over generators": "{% for i in range(99999)|map('string') %}{% for j in range(99999)|map('string') %}"
                             "{% endfor %}{% endfor %}",
    "a long text": "{% for i in range(100000) %}" + "x" * 1000 + "{% endfor %}",
}


def test_hostile_templates_are_refused_naming_the_limit():
    got = render_bounded([[t, None] for t in HOSTILE.values()])
    for name, (kind, message) in zip(HOSTILE, got):
        assert kind == "ChatTemplateError", (name, kind, message)
        assert ("max_iterations=200,000" in message or "max_chars=16,777,216" in message) \
            and "template_limits=TemplateLimits(" in message, (name, message)


def test_the_limits_can_be_raised_and_ordinary_templates_are_untouched():
    loop = "{% for i in range(300000) %}{% endfor %}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    long = "{{ 'x' * 20000000 }}"
    got = render_bounded([[loop, None], [loop, {"max_iterations": 400_000}], [long, None],
                          [long, {"max_chars": 1 << 25}], [long, {"max_chars": 1 << 25, "max_iterations": 1}]])
    assert got[0][0] == "ChatTemplateError" and "max_iterations=200,000" in got[0][1]
    assert got[1] == ["ok", 2]
    assert got[2][0] == "ChatTemplateError" and "about 20,000,000 characters" in got[2][1]
    assert got[3] == ["ok", 20_000_000] and got[4] == ["ok", 20_000_000]


def test_template_limits_are_checked():
    from shardstream.errors import InvalidArgumentError
    from shardstream.testing.text import CHATML_TEMPLATE, tiny_tokenizer
    from shardstream.text import ChatTemplateTransform, TemplateLimits

    with pytest.raises(InvalidArgumentError, match="max_chars"):
        TemplateLimits(max_chars=0)
    with pytest.raises(InvalidArgumentError, match="template_limits"):
        ChatTemplateTransform(tiny_tokenizer(), chat_template=CHATML_TEMPLATE, template_limits={"max_chars": 10})
