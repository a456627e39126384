"""The store owns its SQL: no module outside ``tcbench/store/`` (nor the widgets) writes a statement; they call the
store's named methods, which return structured values."""

import io
import re
import tokenize
from pathlib import Path

import tcbench

ROOT = Path(tcbench.__file__).parent
STATEMENT = re.compile(r"\b(SELECT\s+\S|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)|"
                       r"ALTER\s+TABLE|DROP\s+TABLE|PRAGMA\s+\w)")


def _sql_literals(path: Path) -> list[str]:
    """The string literals of a module that hold an SQL statement (comments and names do not count)."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return [f"{path.name}:{t.start[0]}: {t.string[:80]}" for t in tokens
            if t.type in (tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)) and STATEMENT.search(t.string)]


def test_no_sql_text_outside_the_store():
    modules = [p for p in ROOT.rglob("*.py") if ROOT / "store" not in p.parents]
    modules += sorted((ROOT.parent / "widgets").glob("*.py"))
    assert len(modules) > 50
    found = [hit for p in modules for hit in _sql_literals(p)]
    assert found == [], "\n".join(found)


def test_the_check_sees_a_statement(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('# SELECT in a comment is no statement\n'
                      'q = ("SELECT spec_json FROM runs "\n     "WHERE x = 1")\n')
    assert len(_sql_literals(module)) == 1 and "SELECT spec_json" in _sql_literals(module)[0]
