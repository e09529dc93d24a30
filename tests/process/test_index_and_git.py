"""Release candidates from a real (loopback) PEP 691 index and commit candidates from a real git repo."""
from __future__ import annotations

import datetime as dt
import os
import re
import time

import git as gitpython
import pytest

from bisector.sources import git as gitrepo
from bisector.sources import index
from bisector.job.config import JobSection
from bisector.errors import UsageError
from bisector.bisection.plan import commit_plan, release_plan
from tests.support.gitfixture import git, make_repo
from tests.support.pkgindex import LocalIndex, build_wheel

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def served_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("index")
    idx = LocalIndex(root / "idx")
    versions = ["0.1.0", "0.2.0", "0.2.1", "0.3.0rc1", "0.3.0", "0.4.0", "1.0.0"]
    for i, v in enumerate(versions):
        idx.add(build_wheel(root / "wheels", "tinypkg", v), T0 + dt.timedelta(days=i), yanked=(v == "0.4.0"))
    with idx.serve() as url:
        yield url


def test_releases_inclusive_sorted_without_pre_and_yanked(served_index):
    releases = index.list_releases(served_index, "TinyPkg")
    chosen = index.releases_between(releases, "v0.2", "1.0.0")
    assert [r.version for r in chosen] == ["0.2.0", "0.2.1", "0.3.0", "1.0.0"]
    assert chosen[0].uploaded == T0 + dt.timedelta(days=1)
    with_pre = index.releases_between(releases, "0.2", "1.0", pre=True)
    assert [r.version for r in with_pre] == ["0.2.0", "0.2.1", "0.3.0rc1", "0.3.0", "0.4.0", "1.0.0"]


@pytest.mark.parametrize("good,bad,message", [
    ("0.2.5", "1.0.0", "version 0.2.5 does not exist (nearest: 0.2.0, 0.2.1, 0.3.0rc1, 0.3.0)"),
    ("0.2.0", "0.2", "same version"),
    ("1.0.0", "0.2.0", "newer than bad"),
    ("not-a-version!", "1.0", "not a valid version"),
])
def test_release_range_errors(served_index, good, bad, message):
    releases = index.list_releases(served_index, "tinypkg")
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        index.releases_between(releases, good, bad)


def test_unknown_package_is_usage_error(served_index):
    with pytest.raises(UsageError, match="not found"):
        index.list_releases(served_index, "nosuchpkg")


def test_release_plan_uses_explicit_index(served_index):
    job = JobSection(package="tinypkg", good="0.1", bad="0.3", index_url=served_index)
    plan = release_plan(job)
    assert [c.ref for c in plan.candidates] == ["0.1.0", "0.2.0", "0.2.1", "0.3.0"]


def test_commit_plan_first_parent_and_facts(tmp_path):
    repo, shas = make_repo(tmp_path, commits=6, bad_at=3, tags={0: "v0.1.0", 5: "v0.1.5"})
    job = JobSection(package="tinypkg", good="v0.1.0", bad="v0.1.5", mode="commits")
    plan = commit_plan(job, str(repo), tmp_path / "cache")
    assert [c.ref for c in plan.candidates] == shas
    c = plan.candidates[2]
    assert c.subject == "Change number 2 (#102)" and c.pr == 102 and c.author == "Dev One"
    assert c.date == dt.datetime(2024, 1, 3, 10, tzinfo=dt.timezone.utc)


def test_merge_base_when_good_is_on_a_release_branch(tmp_path):
    repo, shas = make_repo(tmp_path, commits=6, bad_at=3)
    git(repo, "checkout", "-q", "-b", "release", shas[2])
    (repo / "hotfix.txt").write_text("x")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "hotfix")
    git(repo, "tag", "v0.1.2.post1")
    git(repo, "checkout", "-q", "main")
    job = JobSection(package="tinypkg", good="v0.1.2.post1", bad="main", mode="commits")
    plan = commit_plan(job, str(repo), tmp_path / "cache")
    assert plan.candidates[0].ref == shas[2]
    assert "merge-base" in plan.notes[0]


@pytest.mark.parametrize("good,bad,message", [
    ("nope", "main", "unknown ref 'nope'"),
    ("main", "main", "same commit"),
    ("v1;touch /tmp/x", "main", "invalid git ref"),
    ("--upload-pack=touch /tmp/x", "main", "invalid git ref"),
])
def test_commit_range_errors(tmp_path, good, bad, message):
    repo, shas = make_repo(tmp_path, commits=3, bad_at=1)
    job = JobSection(package="tinypkg", good=good, bad=bad, mode="commits")
    with pytest.raises(UsageError, match=message):
        commit_plan(job, str(repo), tmp_path / "cache")


def test_good_newer_than_bad_commit(tmp_path):
    repo, shas = make_repo(tmp_path, commits=3, bad_at=1)
    job = JobSection(package="tinypkg", good=shas[2], bad=shas[0], mode="commits")
    with pytest.raises(UsageError, match="newer than bad"):
        commit_plan(job, str(repo), tmp_path / "cache")


def test_a_version_names_its_tag_and_find_fix_says_which_end_is_which(tmp_path):
    """--good 0.1.1 in a commit bisect is the tag v0.1.1; with --find-fix, --bad is the older side: the ends
    given the other way round are one line saying so (also across branches, by date)."""
    repo, shas = make_repo(tmp_path, commits=6, bad_at=3, tags={1: "v0.1.1", 4: "v0.1.4"})
    assert gitrepo.resolve(repo, "0.1.1") == shas[1] and gitrepo.resolve(repo, "v0.1.4") == shas[4]
    plan = commit_plan(JobSection(package="tinypkg", good="0.1.1", bad="0.1.4", mode="commits"), str(repo),
                       tmp_path / "cache")
    assert [c.ref for c in plan.candidates] == shas[1:5]
    fixed = commit_plan(JobSection(package="tinypkg", bad="0.1.1", good="0.1.4", mode="commits", find_fix=True),
                        str(repo), tmp_path / "cache")
    assert [c.ref for c in fixed.candidates] == shas[1:5]
    expected = "with --find-fix, --bad names the older side (still broken) and --good the newer one (fixed): "
    with pytest.raises(UsageError, match=re.escape(f"{expected}--bad 0.1.1 --good 0.1.4")):
        commit_plan(JobSection(package="tinypkg", good="0.1.1", bad="0.1.4", mode="commits", find_fix=True),
                    str(repo), tmp_path / "cache")
    git(repo, "checkout", "-q", "-b", "release", shas[2])   # a release branch: neither end is the other's ancestor
    (repo / "patch.txt").write_text("backport\n")
    git(repo, "add", "-A", date="2024-01-04T12:00:00+00:00")
    git(repo, "commit", "-q", "-m", "Backport (#999)", date="2024-01-04T12:00:00+00:00")
    git(repo, "tag", "v0.1.2.post1", date="2024-01-04T12:00:00+00:00")
    with pytest.raises(UsageError, match=re.escape(f"{expected}--bad 0.1.2.post1 --good 0.1.4")):
        commit_plan(JobSection(package="tinypkg", good="0.1.2.post1", bad="0.1.4", mode="commits", find_fix=True),
                    str(repo), tmp_path / "cache")


def test_url_repo_is_cloned_once_then_fetched(tmp_path):
    repo, shas = make_repo(tmp_path, commits=3, bad_at=1)
    url = f"file://{repo}"
    first = gitrepo.open_repo(url, tmp_path / "cache")
    (repo / "new.txt").write_text("n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "newer")
    second = gitrepo.open_repo(url, tmp_path / "cache")
    assert first == second
    assert gitrepo.resolve(second, "main") == git(repo, "rev-parse", "HEAD").strip()


def test_web_links_drop_credentials():
    assert gitrepo.web_url("https://user:tok@example.com/org/proj.git") == "https://example.com/org/proj"
    assert gitrepo.web_url("git@example.com:org/proj.git") == "https://example.com/org/proj"
    assert gitrepo.web_url("/local/path") is None


def test_links_from_origin_or_repo_url(tmp_path):
    repo, shas = make_repo(tmp_path, commits=3, bad_at=1)
    git(repo, "remote", "add", "origin", "git@example.com:org/tinypkg.git")
    job = JobSection(package="tinypkg", good=shas[0], bad=shas[-1], mode="commits")
    assert commit_plan(job, str(repo), tmp_path / "c").repo_url == "https://example.com/org/tinypkg"
    job = job.model_copy(update={"repo_url": "https://example.org/mirror/"})
    assert commit_plan(job, str(repo), tmp_path / "c").repo_url == "https://example.org/mirror"


def test_git_commands_run_bounded_and_their_process_group_is_stopped(tmp_path):
    """Every git command goes through bisector.process.procs: past its time limit git and its children are
    stopped with the same escalation as a probe (nothing is left running)."""
    repo, _ = make_repo(tmp_path, commits=1, bad_at=1)
    start = time.monotonic()
    with pytest.raises(gitpython.GitCommandError, match="timed out after 1s"):
        gitrepo.repository(repo).git.execute(["git", "-c", "alias.hang=!sleep 31.5", "hang"], kill_after_timeout=1)
    assert time.monotonic() - start < 10
    assert "sleep 31.5" not in os.popen("ps -eo args").read()
