"""Every code block of README.md and docs/*.md runs as written and prints what its page says
(issue 23.3). Pages and blocks are found automatically; tests/docrunner.py describes the
marker convention a block uses to say how it runs (servers, files, expected output, skips)."""
from __future__ import annotations

import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from docrunner import REPO, DocError, PageRun, blocks_of, pages

# a malformed marker fails that page's test (with its line), not the module's collection
PAGES = [p for p in pages() if "```" in p.read_text()]


def test_the_runner_finds_the_pages_and_their_blocks():
    names = {p.relative_to(REPO).as_posix() for p in PAGES}
    assert {"README.md", "docs/messaging.md", "docs/admin.md", "docs/cluster.md"} <= names
    blocks = [b for p in PAGES for b in blocks_of(p)]
    assert len(blocks) > 25
    skipped = [b for b in blocks if "skip" in b.marker]
    assert len(skipped) <= len(blocks) // 4, [b.where for b in skipped]


@pytest.fixture(scope="module")
def page_runs(request, tmp_path_factory):
    """The selected pages run side by side (each in its own directory, with its own servers
    and ports): most of a page's time is waiting on servers, consumers and Spark's JVM."""
    wanted = [item.callspec.params["page"] for item in request.session.items
              if getattr(item, "callspec", None) and "page" in item.callspec.params]
    pool = ThreadPoolExecutor(3)

    def run(page: Path) -> PageRun:
        r = PageRun(page, tmp_path_factory.mktemp(page.stem))   # DocError: a bad marker
        r.run()
        return r
    futures = {page: pool.submit(run, page) for page in wanted}
    yield futures
    pool.shutdown(wait=True)


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_block_of_the_page_runs_as_written(page: Path, page_runs):
    run = page_runs[page].result()
    assert not run.failures, "\n\n".join(run.failures)
    assert run.ran, page


def write_page(tmp_path: Path, text: str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(text))
    return page


def run_page(tmp_path: Path, text: str) -> PageRun:
    run = PageRun(write_page(tmp_path, text), tmp_path / "run")
    run.run()
    return run


def test_a_block_that_prints_something_else_fails_naming_page_line_and_output(tmp_path):
    run = run_page(tmp_path, '''\
        # a page

        ```python
        print("hello")   # -> hello
        print(6 * 7)     # -> 41
        ```
        ''')
    assert len(run.failures) == 1
    msg = run.failures[0]
    assert "page.md:3:" in msg and "'41'" in msg and "hello\n42" in msg


def test_a_block_that_says_nothing_about_its_output_fails(tmp_path):
    run = run_page(tmp_path, '''\
        ```python
        x = 1
        ```

        ```sh
        true
        ```
        ''')
    assert [m.split(":")[1] for m in run.failures] == ["1", "5"]
    assert all("does not say what it prints" in m for m in run.failures)


def test_unmarked_non_code_blocks_and_bare_skips_are_refused(tmp_path):
    run = run_page(tmp_path, '''\
        ```
        a/b/c
        ```
        ''')
    assert "needs a marker" in run.failures[0]
    with pytest.raises(DocError, match="skip needs a reason"):
        blocks_of(write_page(tmp_path, '<!-- run: skip -->\n```\nx\n```\n'))
    with pytest.raises(DocError, match="unknown marker word 'nedds'"):
        blocks_of(write_page(tmp_path, '<!-- run: nedds=broker -->\n```python\nx\n```\n'))


def test_files_ellipses_exit_status_and_transcripts(tmp_path):
    run = run_page(tmp_path, '''\
        <!-- run: file=conf/app.properties -->
        ```properties
        listen=127.0.0.1:9876
        ```

        <!-- run: exit=3 -->
        ```sh
        cat conf/app.properties   # -> listen=127.0.0.1:...
        exit 3
        ```

        ```console
        $ echo one; echo two; echo three
        one
        ...three
        ```

        ```console
        $ echo one
        two
        ```
        ''')
    assert len(run.failures) == 1
    assert "page.md:18 `$ echo one`: expected a line 'two'" in run.failures[0]
    # the same port maps to the same free port in every block of a page
    assert run.ports["9876"] != 9876
    conf = (run.work / "conf/app.properties").read_text()
    assert conf == f"listen=127.0.0.1:{run.ports['9876']}\n"


def test_a_block_that_runs_too_long_is_stopped_with_what_it_started(tmp_path):
    run = run_page(tmp_path, '''\
        <!-- run: timeout=2 -->
        ```sh
        sleep 300 &
        echo $! > bg.pid
        echo started   # -> started
        sleep 300
        ```
        ''')
    assert len(run.failures) == 1 and "page.md:2: still running after 2 s" in run.failures[0]
    assert "started" in run.failures[0]
    pid = int((run.work / "bg.pid").read_text())
    for _ in range(100):     # killed, and reaped by init
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the block's background process {pid} still runs")


def test_session_blocks_share_one_interpreter_but_not_globals(tmp_path):
    run = run_page(tmp_path, '''\
        <!-- run: session=one -->
        ```python
        import os, sys
        x = 1
        sys.docrunner_pid = os.getpid()
        print("first")   # -> first
        ```

        <!-- run: session=one -->
        ```python
        import os, sys
        print(sys.docrunner_pid == os.getpid(), "x" in globals())   # -> True False
        raise SystemExit(3)
        ```
        ''')
    assert len(run.failures) == 1 and "page.md:10: exit status 3" in run.failures[0]
    assert "True False" in run.failures[0]


def test_a_session_block_waits_for_the_files_and_servers_above_it(tmp_path):
    run = run_page(tmp_path, '''\
        ```sh
        sleep 1; echo slow   # -> slow
        ```

        <!-- run: file=data.txt -->
        ```text
        from the file block
        ```

        <!-- run: session=one -->
        ```python
        print(open("data.txt").read())   # -> from the file block
        ```
        ''')
    assert not run.failures, run.failures
    assert len(run.ran) == 3


def test_a_synopsis_option_the_command_does_not_have_fails(tmp_path):
    run = run_page(tmp_path, '''\
        <!-- run: synopsis -->
        ```sh
        rocketstore stat STORE [--json]          # fine
        rocketstore get STORE TOPIC QUEUE OFFSET [-n 10]
                        [--no-such-flag]
        .venv/bin/pip install -q -e '.[nonesuch]'
        ```
        ''')
    assert len(run.failures) == 1 and "--no-such-flag" in run.failures[0]
    run = run_page(tmp_path / "pip", '''\
        <!-- run: synopsis -->
        ```sh
        .venv/bin/pip install -q -e '.[spark]'
        .venv/bin/pip install -q -e '.[nonesuch]'
        ```
        ''')
    assert len(run.failures) == 1 and "no extra 'nonesuch'" in run.failures[0]
