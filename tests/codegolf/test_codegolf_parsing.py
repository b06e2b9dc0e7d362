"""Where the program is in a reply: the last python block, or the whole reply."""

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from rollyard_codegolf.parsing import extract_program


def test_last_python_block_wins():
    reply = ("First try:\n```python\nprint(1)\n```\nShorter:\n```python\nprint(2)\n```\n"
             "Done.")
    assert extract_program(reply) == "print(2)"


@pytest.mark.parametrize("tag", ["", "py", "python3", "Python"])
def test_untagged_and_python_variants_count(tag):
    assert extract_program(f"```{tag}\nprint(input())\n```") == "print(input())"


def test_blocks_in_other_languages_are_ignored():
    reply = "```python\nprint(1)\n```\n```bash\nrm -rf /\n```"
    assert extract_program(reply) == "print(1)"


def test_tilde_fences_and_longer_backtick_fences():
    assert extract_program("~~~python\na=1\nprint(a)\n~~~") == "a=1\nprint(a)"
    assert extract_program("````python\nprint('```')\n````") == "print('```')"


def test_a_reply_cut_inside_its_last_block_keeps_what_was_written():
    assert extract_program("Here:\n```python\nprint(42)\nx=") == "print(42)\nx="


@pytest.mark.parametrize("reply", ["", "no code at all", "```python\n\n```", "```js\nx\n```"])
def test_missing_or_blank_program_is_none(reply):
    assert extract_program(reply) is None


def test_whole_mode_takes_the_reply_or_its_single_block():
    assert extract_program("print(7)\n", mode="whole") == "print(7)"
    assert extract_program("```python\nprint(7)\n```", mode="whole") == "print(7)"
    assert extract_program("   \n", mode="whole") is None


def test_unknown_mode_is_rejected_by_name():
    with pytest.raises(ValueError, match="'first'"):
        extract_program("x", mode="first")


_code_line = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="`~"),
                     min_size=1, max_size=30).filter(lambda s: s.strip())
_prose = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="`~"),
                 max_size=40)


@given(lines=st.lists(_code_line, min_size=1, max_size=5), before=_prose, after=_prose)
def test_the_program_in_a_block_comes_back_whatever_surrounds_it(lines, before, after):
    program = "\n".join(lines).strip("\n").rstrip()
    assume(program.strip())
    reply = f"{before}\n```python\n{program}\n```\n{after}"
    assert extract_program(reply) == program
