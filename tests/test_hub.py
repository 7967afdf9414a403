"""mge.hub: hubconf entry points from a local directory and from git repos (a bare repo in
tmp_path reached through git's ``url.<base>.insteadOf``, and a zip archive through ``file://``),
pretrained weights downloaded through urllib from ``file://`` URLs, the cache, and the errors.
No network: the offline cases use hosts under ``.invalid``, which never resolve."""
import hashlib
import inspect
import os
import shutil
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

import mge
import mge.hub as hub
import mge.module as M
from mge.hub import fetcher as hub_fetcher
from mge.hub.exceptions import (
    FetcherError,
    GitCheckoutError,
    GitPullError,
    HTTPDownloadError,
    InvalidGitHost,
    InvalidProtocol,
    InvalidRepo,
)

HUBCONF = '''
import mge.module as M
import mge.hub as hub

dependencies = ["numpy"]
VALUE = 3
LOADS = globals().setdefault("LOADS", 0) + 1


def net(n=3, out=2):
    """A linear net of n inputs."""
    return M.Linear(n, out)


@hub.pretrained({url!r})
def pretrained_net(**kwargs):
    """The linear net, with weights when pretrained=True."""
    return M.Linear(3, 2)


def _private():
    return 0
'''

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="the git command is not installed")


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """Every test gets its own MGE_HOME, so nothing touches ~/.cache/megengine."""
    h = tmp_path / "mge_home"
    monkeypatch.setenv("MGE_HOME", str(h))
    return h


def _weights(tmp_path, seed=0):
    rng = np.random.RandomState(seed)
    state = {"weight": rng.randn(2, 3).astype("float32"), "bias": rng.randn(2).astype("float32")}
    path = tmp_path / "weights" / "linear_w.pkl"
    path.parent.mkdir(exist_ok=True)
    mge.save(state, str(path))
    return state, path


def _repo(tmp_path, url="file:///nonexistent/w.pkl", name="repo"):
    d = tmp_path / name
    d.mkdir()
    (d / "hubconf.py").write_text(HUBCONF.format(url=url))
    return d


# ---------------------------------------------------------------- the API

def test_names_and_signatures():
    assert sorted(hub.__all__) == sorted(
        ["help", "import_module", "list", "load", "load_serialized_obj_from_url", "pretrained"]
    )
    for name in hub.__all__:
        assert getattr(hub, name).__doc__, name
    assert str(inspect.signature(hub.load)) == (
        "(repo_info: str, entry: str, *args, git_host: str = 'github.com', use_cache: bool = True, "
        "commit: str = None, protocol: str = 'HTTPS', **kwargs) -> Any"
    )
    assert list(inspect.signature(hub.list).parameters) == [
        "repo_info", "git_host", "use_cache", "commit", "protocol"]
    assert list(inspect.signature(hub.help).parameters) == [
        "repo_info", "entry", "git_host", "use_cache", "commit", "protocol"]
    assert list(inspect.signature(hub.import_module).parameters) == [
        "repo_info", "git_host", "use_cache", "commit", "protocol"]
    assert list(inspect.signature(hub.load_serialized_obj_from_url).parameters) == ["url", "model_dir"]
    for e in (InvalidRepo, InvalidGitHost, GitPullError, GitCheckoutError, InvalidProtocol):
        assert issubclass(e, FetcherError)
    assert mge.hub is hub


def test_megengine_home(monkeypatch):
    from mge.hub.hub import _get_megengine_home
    monkeypatch.setenv("MGE_HOME", "/x/y")
    assert _get_megengine_home() == "/x/y"
    monkeypatch.delenv("MGE_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", "/c")
    assert _get_megengine_home() == os.path.join("/c", "megengine")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert _get_megengine_home() == os.path.expanduser(os.path.join("~/.cache", "megengine"))


# ---------------------------------------------------------------- a local directory

def test_local_list_help_load(tmp_path):
    # MegEngine lists every callable whose name does not start with "__" (so _private too)
    d = _repo(tmp_path)
    assert hub.list(str(d)) == ["_private", "net", "pretrained_net"]
    assert hub.help(str(d), "net") == "A linear net of n inputs."
    m = hub.load(str(d), "net", 4, out=5)
    assert isinstance(m, M.Linear) and m.weight.shape == (5, 4)
    assert hub.load(d, "net").weight.shape == (2, 3)  # an os.PathLike
    mod = hub.import_module(str(d), "github.com")
    assert mod.VALUE == 3 and mod.LOADS == 1  # a fresh module each time
    assert str(d) not in sys.path


def test_local_relative_paths(tmp_path, monkeypatch):
    _repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert hub.list("./repo") == ["_private", "net", "pretrained_net"]
    monkeypatch.chdir(tmp_path / "repo")
    assert hub.list(".") == ["_private", "net", "pretrained_net"]


def test_bad_inputs(tmp_path):
    d = _repo(tmp_path)
    with pytest.raises(RuntimeError, match="^Cannot find callable nope in hubconf.py$"):
        hub.load(str(d), "nope")
    with pytest.raises(RuntimeError, match="^Cannot find callable VALUE in hubconf.py$"):
        hub.help(str(d), "VALUE")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="hubconf.py"):
        hub.load(str(empty), "net")
    with pytest.raises(InvalidRepo, match="no such local directory"):
        hub.list(str(tmp_path / "missing"))
    for bad in ("bad", "a/b/c", "a/b:c:d", "a/:x"):
        with pytest.raises(InvalidRepo, match="^repo_info: '{}' is invalid.$".format(bad)):
            hub.list(bad)
    with pytest.raises(InvalidGitHost, match="^git_host: 'bad host' is malformed.$"):
        hub.list("owner/repo", git_host="bad host")
    with pytest.raises(InvalidProtocol, match="^Invalid protocol, the value should be one of HTTPS, SSH.$"):
        hub.list(str(d), protocol="FTP")


def test_missing_dependencies(tmp_path):
    d = tmp_path / "deps"
    d.mkdir()
    (d / "hubconf.py").write_text(
        "dependencies = ['numpy', 'no_such_mod_x1', 'no_such.pkg']\ndef f():\n    return 1\n")
    with pytest.raises(RuntimeError, match="^Missing dependencies: no_such_mod_x1, no_such.pkg$"):
        hub.load(str(d), "f")
    assert hub.list(str(d)) == ["f"]  # list does not check them


def test_hubconf_imports_its_repo(tmp_path):
    d = tmp_path / "withmod"
    d.mkdir()
    (d / "hub_helper_mod_q7.py").write_text("def make():\n    return 'made'\n")
    (d / "hubconf.py").write_text("from hub_helper_mod_q7 import make\n")
    try:
        assert hub.load(str(d), "make") == "made"
    finally:
        sys.modules.pop("hub_helper_mod_q7", None)


# ---------------------------------------------------------------- pretrained weights

def test_pretrained_from_file_url(tmp_path, home):
    state, path = _weights(tmp_path)
    url = path.as_uri()
    d = _repo(tmp_path, url=url)
    plain = hub.load(str(d), "pretrained_net")
    assert not np.allclose(plain.weight.numpy(), state["weight"])
    m = hub.load(str(d), "pretrained_net", pretrained=True)
    np.testing.assert_allclose(m.weight.numpy(), state["weight"])
    np.testing.assert_allclose(m.bias.numpy(), state["bias"])
    cached = home / "serialized" / (hashlib.sha256(url.encode()).hexdigest()[:6] + "_linear_w.pkl")
    assert cached.is_file()
    assert hub.help(str(d), "pretrained_net") == "The linear net, with weights when pretrained=True."


def test_load_serialized_obj_cache(tmp_path):
    state, path = _weights(tmp_path, seed=1)
    cache = tmp_path / "cache"
    obj = hub.load_serialized_obj_from_url(path.as_uri(), str(cache))
    np.testing.assert_allclose(obj["weight"], state["weight"])
    files = os.listdir(cache)
    assert len(files) == 1 and files[0].endswith("_linear_w.pkl")
    assert files[0][:6] == hashlib.sha256(path.as_uri().encode()).hexdigest()[:6]
    path.unlink()  # the cached copy is used now
    again = hub.load_serialized_obj_from_url(path.as_uri(), str(cache))
    np.testing.assert_allclose(again["weight"], state["weight"])
    assert os.listdir(cache) == files


def test_load_serialized_obj_local_path_and_default_dir(tmp_path, home):
    state, path = _weights(tmp_path, seed=2)
    obj = hub.load_serialized_obj_from_url(str(path))
    np.testing.assert_allclose(obj["bias"], state["bias"])
    assert len(os.listdir(home / "serialized")) == 1


def test_download_errors_are_clear_and_cache_nothing(tmp_path):
    cache = tmp_path / "cache"
    missing = (tmp_path / "nope.pkl").as_uri()
    with pytest.raises(HTTPDownloadError, match="nope.pkl"):
        hub.load_serialized_obj_from_url(missing, str(cache))
    t = time.time()
    with pytest.raises(HTTPDownloadError, match=r"https://host\.invalid/w\.pkl"):
        hub.load_serialized_obj_from_url("https://host.invalid/w.pkl", str(cache))
    assert time.time() - t < 30
    with pytest.raises(HTTPDownloadError, match="unsupported URL scheme 's3'"):
        hub.load_serialized_obj_from_url("s3://bucket/w.pkl", str(cache))
    assert os.listdir(cache) == []


def test_pretrained_decorator_direct(tmp_path):
    state, path = _weights(tmp_path, seed=3)

    @hub.pretrained(path.as_uri())
    def make(**kwargs):
        """doc of make"""
        return M.Linear(3, 2, **kwargs)

    assert make.__name__ == "make" and make.__doc__ == "doc of make"
    np.testing.assert_allclose(make(pretrained=True).weight.numpy(), state["weight"])
    assert make(bias=False).bias is None


# ---------------------------------------------------------------- git over "SSH", offline

def _git(*args, cwd):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run([GIT] + list(args), cwd=cwd, env=env, check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE).stdout.decode().strip()


@pytest.fixture
def git_remote(tmp_path, monkeypatch):
    """A bare repo owner/repo.git in tmp_path that ``git@fake.example:`` URLs reach."""
    src = _repo(tmp_path, name="src")
    _git("init", "-q", cwd=src)
    _git("checkout", "-q", "-b", "master", cwd=src)
    _git("add", ".", cwd=src)
    _git("commit", "-qm", "one", cwd=src)
    first = _git("rev-parse", "HEAD", cwd=src)
    (src / "hubconf.py").write_text((src / "hubconf.py").read_text() + "\ndef second():\n    return 2\n")
    _git("commit", "-qam", "two", cwd=src)
    _git("checkout", "-q", "-b", "dev/x", cwd=src)
    (src / "hubconf.py").write_text("def dev():\n    return 'dev'\n")
    _git("commit", "-qam", "dev", cwd=src)
    remote = tmp_path / "remote"
    (remote / "owner").mkdir(parents=True)
    _git("clone", "-q", "--bare", str(src), str(remote / "owner" / "repo.git"), cwd=tmp_path)
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "url.{}/.insteadOf".format(remote.as_uri()))
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "git@fake.example:")
    return first


SSH = dict(git_host="fake.example", protocol="SSH")


@needs_git
def test_git_ssh_fetch_branch_commit_cache(git_remote, home):
    assert hub.list("owner/repo", **SSH) == ["_private", "net", "pretrained_net", "second"]
    assert hub.load("owner/repo:dev/x", "dev", **SSH) == "dev"
    assert hub.list("owner/repo", commit=git_remote, **SSH) == ["_private", "net", "pretrained_net"]
    dirs = sorted(os.listdir(home / "hub"))
    assert len(dirs) == 3 and all(d.startswith("_".join(mge.__version__.split(".")) + "_") for d in dirs)
    # the folder name is MegEngine's: version + sha1("owner_repo_branch[_commit]")[:16]
    name = hub_fetcher.RepoFetcherBase._repo_dir_name("owner", "repo", "master", None)
    assert name.endswith(hashlib.sha1(b"owner_repo_master").hexdigest()[:16]) and name in dirs
    repo = home / "hub" / name
    assert not (repo / ".git").exists()

    # use_cache=True (the default) reuses the folder; use_cache=False fetches again
    (repo / "hubconf.py").write_text("def cached():\n    return 1\n")
    assert hub.list("owner/repo", **SSH) == ["cached"]
    assert hub.list("owner/repo", use_cache=False, **SSH) == ["_private", "net", "pretrained_net", "second"]
    assert not [d for d in os.listdir(home / "hub") if d.startswith(".")]  # no temporary left


@needs_git
def test_git_ssh_errors(git_remote, home):
    with pytest.raises(GitPullError, match="git@fake.example:owner/none.git") as e:
        hub.list("owner/none", **SSH)
    assert str(e.value).startswith("Repo pull error, please check repo info.")
    with pytest.raises(GitPullError, match="nobranch"):
        hub.list("owner/repo:nobranch", **SSH)
    with pytest.raises(GitCheckoutError, match="^Git checkout error, please check the commit id."):
        hub.list("owner/repo", commit="deadbeef", **SSH)
    assert os.listdir(home / "hub") == []  # failed fetches cache nothing


@needs_git
def test_git_ssh_offline_is_quick_and_clear():
    t = time.time()
    with pytest.raises(GitPullError, match="git@nonexistent.invalid:owner/repo.git"):
        hub.load("owner/repo", "net", git_host="nonexistent.invalid", protocol="SSH")
    assert time.time() - t < 60


def test_git_missing_command(monkeypatch):
    monkeypatch.setenv("PATH", "")
    with pytest.raises(GitPullError, match="the `git` command was not found"):
        hub.list("owner/repo", git_host="fake.example", protocol="SSH")


# ---------------------------------------------------------------- the HTTPS archive

def _zip(tmp_path, top="repo-master", url="file:///nonexistent/w.pkl"):
    z = tmp_path / "archive.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr(top + "/hubconf.py", HUBCONF.format(url=url))
        f.writestr(top + "/README", "x")
    return z


def test_https_archive(tmp_path, home, monkeypatch):
    z = _zip(tmp_path)
    seen = []

    def link(cls, git_host, owner, name, branch, commit):
        seen.append((git_host, owner, name, branch, commit))
        return z.as_uri()

    monkeypatch.setattr(hub_fetcher.GitHTTPSFetcher, "_git_archive_link", classmethod(link))
    assert hub.list("owner/repo") == ["_private", "net", "pretrained_net"]
    assert seen == [("github.com", "owner", "repo", "master", None)]
    assert hub.load("owner/repo:v1", "net", commit="abc").weight.shape == (2, 3)
    assert seen[-1] == ("github.com", "owner", "repo", "v1", "abc")
    (d,) = [x for x in os.listdir(home / "hub") if hub_fetcher.RepoFetcherBase._repo_dir_name(
        "owner", "repo", "master", None) == x]
    assert sorted(os.listdir(home / "hub" / d)) == ["README", "hubconf.py"]
    z.unlink()
    assert hub.list("owner/repo") == ["_private", "net", "pretrained_net"]  # cached
    with pytest.raises(HTTPDownloadError, match="archive.zip"):
        hub.list("owner/repo", use_cache=False)


def test_https_archive_link_and_offline():
    assert hub_fetcher.GitHTTPSFetcher._git_archive_link("github.com", "o", "r", "master", None) == \
        "https://github.com/o/r/archive/master.zip"
    assert hub_fetcher.GitHTTPSFetcher._git_archive_link("github.com", "o", "r", "master", "c1") == \
        "https://github.com/o/r/archive/c1.zip"
    t = time.time()
    with pytest.raises(HTTPDownloadError,
                       match=r"https://nonexistent\.invalid/owner/repo/archive/master\.zip"):
        hub.load("owner/repo", "net", git_host="nonexistent.invalid")
    assert time.time() - t < 30


def test_https_not_a_zip(tmp_path, monkeypatch):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    monkeypatch.setattr(hub_fetcher.GitHTTPSFetcher, "_git_archive_link",
                        classmethod(lambda cls, *a: bad.as_uri()))
    with pytest.raises(HTTPDownloadError, match="not a zip archive"):
        hub.list("owner/repo")


def test_git_host_checks():
    ok = hub_fetcher.RepoFetcherBase._check_git_host
    assert ok("github.com") and ok("git.example.co.uk") and ok("10.0.0.1")
    assert not ok("bad host") and not ok("300.1.1.1") and not ok("localhost")


# ---------------------------------------------------------------- the guide's example

def test_guide_example_runs(tmp_path):
    import pathlib
    import textwrap
    page = pathlib.Path(__file__).resolve().parent.parent / "docs" / "guides" / "hub.rst"
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == ".. code-block:: python":
            i += 1
            body = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("   ")):
                body.append(lines[i])
                i += 1
            blocks.append(textwrap.dedent("\n".join(body)))
        else:
            i += 1
    assert blocks
    for code in blocks:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           cwd=str(tmp_path))
        assert p.returncode == 0, p.stderr
        assert "['tiny_linear']" in p.stdout


# ---------------------------------------------------------------- http on the loopback

@pytest.fixture
def http_root(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/www (no network needed)."""
    import functools
    import http.server
    import threading
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.func.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield www, "http://127.0.0.1:{}".format(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def test_http_download_and_404(tmp_path, http_root):
    www, base = http_root
    state, path = _weights(tmp_path, seed=4)
    shutil.copy(str(path), str(www / "w.pkl"))
    obj = hub.load_serialized_obj_from_url(base + "/w.pkl", str(tmp_path / "c"))
    np.testing.assert_allclose(obj["weight"], state["weight"])
    with pytest.raises(HTTPDownloadError, match=r"/missing\.pkl: HTTP 404"):
        hub.load_serialized_obj_from_url(base + "/missing.pkl", str(tmp_path / "c"))
    assert len(os.listdir(tmp_path / "c")) == 1
