"""Fetching a hub repo's code into the cache (MegEngine 1.13's ``hub/fetcher.py``).

``GitSSHFetcher`` runs ``git clone`` on ``git@host:owner/repo.git``; ``GitHTTPSFetcher`` downloads
``https://host/owner/repo/archive/<branch or commit>.zip`` through urllib.  Both put the code in a
folder named after mge's version and a hash of ``owner_repo_branch[_commit]``, reuse it when asked
to, and build it in a temporary folder that is renamed into place once complete, so an interrupted
fetch never leaves a half repo for the next call to trust.
"""
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from typing import Tuple

from ..version import __version__
from ..distributed import is_distributed, synchronized
from ..logger import get_logger
from .const import (
    CHUNK_SIZE,
    DEFAULT_BRANCH_NAME,
    GIT_SSH_CONNECT_TIMEOUT,
    GIT_TIMEOUT,
    HTTP_CONNECTION_TIMEOUT,
    HTTP_READ_TIMEOUT,
)
from .download import Bar, open_url
from .exceptions import (
    GitCheckoutError,
    GitPullError,
    HTTPDownloadError,
    InvalidGitHost,
    InvalidRepo,
)

logger = get_logger(__name__)

HTTP_TIMEOUT = (HTTP_CONNECTION_TIMEOUT, HTTP_READ_TIMEOUT)  # MegEngine's (connect, read) pair

pattern = re.compile(
    r"^(?:[a-z0-9]"  # first character of a label
    r"(?:[a-z0-9-_]{0,61}[a-z0-9])?\.)"  # the rest of the label and its dot
    r"+[a-z0-9][a-z0-9-_]{0,61}"  # the top-level domain but its last character
    r"[a-z]$"  # which is a letter
)

_DISTRIBUTED_WARNING = (
    "When using `hub.load` or `hub.list` to fetch git repositories\n"
    "    in DISTRIBUTED mode for the first time, processes are synchronized to\n"
    "    ensure that target repository is ready to use for each process.\n"
    "    Users are expected to see this warning no more than ONCE, otherwise\n"
    "    (very little chance) you may need to remove corrupt cache\n"
    "    `%s` and fetch again."
)


class RepoFetcherBase:
    r"""What the fetchers share: parsing ``repo_info``, checking the host, naming the cache folder."""

    @classmethod
    def fetch(
        cls,
        git_host: str,
        repo_info: str,
        use_cache: bool = False,
        commit: str = None,
        silent: bool = True,
    ) -> str:
        r"""Fetches the repo; returns the folder holding its code.  Implemented by subclasses."""
        raise NotImplementedError()

    @classmethod
    def _parse_repo_info(cls, repo_info: str) -> Tuple[str, str, str]:
        try:
            branch_info = DEFAULT_BRANCH_NAME
            if ":" in repo_info:
                prefix_info, branch_info = repo_info.split(":")
            else:
                prefix_info = repo_info
            repo_owner, repo_name = prefix_info.split("/")
        except (ValueError, TypeError, AttributeError):
            raise InvalidRepo("repo_info: '{}' is invalid.".format(repo_info)) from None
        if not repo_owner or not repo_name or not branch_info:
            raise InvalidRepo("repo_info: '{}' is invalid.".format(repo_info))
        return repo_owner, repo_name, branch_info

    @classmethod
    def _check_git_host(cls, git_host):
        return cls._is_valid_domain(git_host) or cls._is_valid_host(git_host)

    @classmethod
    def _is_valid_domain(cls, s):
        try:
            return pattern.match(s.encode("idna").decode("ascii"))
        except (UnicodeError, AttributeError):
            return False

    @classmethod
    def _is_valid_host(cls, s):
        nums = str(s).split(".")
        if len(nums) != 4 or any(not _.isdigit() for _ in nums):
            return False
        return all(0 <= int(_) < 256 for _ in nums)

    @classmethod
    def _gen_repo_dir(cls, repo_dir: str) -> str:
        return hashlib.sha1(repo_dir.encode()).hexdigest()[:16]

    @classmethod
    def _repo_dir_name(cls, repo_owner, repo_name, branch_info, commit) -> str:
        normalized_branch_info = branch_info.replace("/", "_")
        raw = "{}_{}_{}".format(repo_owner, repo_name, normalized_branch_info) + (
            "_{}".format(commit) if commit else ""
        )
        return "_".join(__version__.split(".")) + "_" + cls._gen_repo_dir(raw)

    @classmethod
    def _prepare(cls, git_host, repo_info, commit, cache_dir):
        """Checks the inputs; returns (owner, name, branch, folder name, absolute folder)."""
        if not cls._check_git_host(git_host):
            raise InvalidGitHost("git_host: '{}' is malformed.".format(git_host))
        repo_owner, repo_name, branch_info = cls._parse_repo_info(repo_info)
        repo_dir = cls._repo_dir_name(repo_owner, repo_name, branch_info, commit)
        base = os.path.abspath(os.path.expanduser(cache_dir)) if cache_dir else os.getcwd()
        return repo_owner, repo_name, branch_info, repo_dir, os.path.join(base, repo_dir)

    @classmethod
    def _install(cls, built: str, target: str) -> None:
        """Moves the complete folder ``built`` to ``target`` (replacing an old one)."""
        shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(built, target)
        except OSError:
            if not os.path.isdir(target):  # not another process's copy that won the race
                raise


def _git(args, silent, what, error=GitPullError, cwd=None):
    """Runs ``git *args``; raises ``error`` with ``what`` and git's words when it fails."""
    env = dict(os.environ)
    env.setdefault("GIT_TERMINAL_PROMPT", "0")  # fail, do not wait for a password
    if "GIT_SSH_COMMAND" not in env and "GIT_SSH" not in env:
        env["GIT_SSH_COMMAND"] = (
            "ssh -o BatchMode=yes -o ConnectTimeout={} "
            "-o ServerAliveInterval=15 -o ServerAliveCountMax=4".format(GIT_SSH_CONNECT_TIMEOUT)
        )
    kwargs = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE} if silent else {}
    try:
        p = subprocess.run(
            ["git"] + list(args), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            timeout=GIT_TIMEOUT, **kwargs
        )
    except FileNotFoundError:
        raise error("{}: the `git` command was not found; install git.".format(what)) from None
    except subprocess.TimeoutExpired:
        raise error("{}: `git {}` ran past {} s.".format(what, args[0], GIT_TIMEOUT)) from None
    err = p.stderr.decode(errors="replace") if silent and p.stderr else ""
    return p.returncode, err


class GitSSHFetcher(RepoFetcherBase):
    r"""Fetches a repo with ``git clone`` over SSH (``git@host:owner/repo.git``)."""

    @classmethod
    @synchronized
    def fetch(
        cls,
        git_host: str,
        repo_info: str,
        use_cache: bool = False,
        commit: str = None,
        silent: bool = True,
        cache_dir: str = None,
    ) -> str:
        """Fetches git repo by SSH protocol

        Args:
            git_host: host address of git repo. Eg: github.com
            repo_info: a string with format ``"repo_owner/repo_name[:tag_name/:branch_name]"`` with an optional
                tag/branch. The default branch is ``master`` if not specified. Eg: ``"brain_sdk/MegBrain[:hub]"``
            use_cache: whether to use locally fetched code or completely re-fetch.
            commit: commit id on github or gitlab.
            silent: whether to accept the stdout and stderr of the subprocess with PIPE, instead of
                displaying on the screen.
            cache_dir: (mge) the folder to fetch into; by default the current directory, as
                MegEngine's.

        Returns:
            directory where the repo code is stored: its name in the current directory, or
            its absolute path when ``cache_dir`` is given.
        """
        owner, name, branch, repo_dir, target = cls._prepare(git_host, repo_info, commit, cache_dir)
        git_url = "git@{}:{}/{}.git".format(git_host, owner, name)
        result = target if cache_dir else repo_dir

        if use_cache and os.path.exists(target):
            logger.debug("Cache Found in %s", target)
            return result
        if is_distributed():
            logger.warning(_DISTRIBUTED_WARNING, target)

        logger.debug("Git Clone from Repo:%s Branch: %s to %s", git_url, branch, target)
        tmp = tempfile.mkdtemp(dir=os.path.dirname(target), prefix=".fetch_")
        work = os.path.join(tmp, "repo")
        try:
            what = "Repo pull error, please check repo info.\ngit clone {} failed".format(git_url)
            if commit is None:  # shallow clone of the branch or tag
                rc, err = _git(["clone", "-b", branch, git_url, work, "--depth=1"], silent, what)
            else:  # whole clone, then the commit
                rc, err = _git(["clone", git_url, work], silent, what)
            if rc:
                raise GitPullError(what + ":\n" + err)
            if commit is not None:
                what = "Git checkout error, please check the commit id.\ngit checkout {} in {}".format(
                    commit, git_url
                )
                rc, err = _git(["checkout", commit], silent, what, GitCheckoutError, cwd=work)
                if rc:
                    raise GitCheckoutError(what + " failed:\n" + err)
            shutil.rmtree(os.path.join(work, ".git"), ignore_errors=True)
            cls._install(work, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return result


class GitHTTPSFetcher(RepoFetcherBase):
    r"""Fetches a repo as the zip archive of a branch or commit (``https://host/owner/repo/archive/...``)."""

    @classmethod
    @synchronized
    def fetch(
        cls,
        git_host: str,
        repo_info: str,
        use_cache: bool = False,
        commit: str = None,
        silent: bool = True,
        cache_dir: str = None,
    ) -> str:
        """Fetches git repo by HTTPS protocol.

        Args:
            git_host: host address of git repo. Eg: github.com
            repo_info: a string with format ``"repo_owner/repo_name[:tag_name/:branch_name]"`` with an optional
                tag/branch. The default branch is ``master`` if not specified. Eg: ``"brain_sdk/MegBrain[:hub]"``
            use_cache: whether to use locally cached code or completely re-fetch.
            commit: commit id on github or gitlab.
            silent: whether to accept the stdout and stderr of the subprocess with PIPE, instead of
                displaying on the screen.
            cache_dir: (mge) the folder to fetch into; by default the current directory, as
                MegEngine's.

        Returns:
            directory where the repo code is stored: its name in the current directory, or
            its absolute path when ``cache_dir`` is given.
        """
        owner, name, branch, repo_dir, target = cls._prepare(git_host, repo_info, commit, cache_dir)
        archive_url = cls._git_archive_link(git_host, owner, name, branch, commit)
        result = target if cache_dir else repo_dir

        if use_cache and os.path.exists(target):
            logger.debug("Cache Found in %s", target)
            return result
        if is_distributed():
            logger.warning(_DISTRIBUTED_WARNING, target)

        logger.debug("Downloading from %s to %s", archive_url, target)
        cls._download_zip_and_extract(archive_url, target)
        return result

    @classmethod
    def _download_zip_and_extract(cls, url, target_dir):
        tmp = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(target_dir)), prefix=".fetch_")
        try:
            stream, size = open_url(url)
            bar = Bar(total=size)
            archive = os.path.join(tmp, "archive.zip")
            try:
                with stream, open(archive, "wb") as f:
                    while True:
                        chunk = stream.read(CHUNK_SIZE * 64)
                        if not chunk:
                            break
                        bar(len(chunk))
                        f.write(chunk)
            except OSError as exc:
                raise HTTPDownloadError(
                    "An error occured when downloading from {}: {}".format(url, exc)
                ) from exc
            finally:
                bar.close()
            out = os.path.join(tmp, "extracted")
            try:
                with zipfile.ZipFile(archive) as z:
                    names = z.namelist()
                    if not names:
                        raise zipfile.BadZipFile("the archive is empty")
                    zip_dir_name = names[0].split("/")[0]
                    z.extractall(out)
            except zipfile.BadZipFile as exc:
                raise HTTPDownloadError(
                    "An error occured when downloading from {}: not a zip archive of a repo ({})".format(
                        url, exc
                    )
                ) from exc
            top = os.path.join(out, zip_dir_name)
            one_top = all(n == zip_dir_name or n.startswith(zip_dir_name + "/") for n in names)
            cls._install(top if one_top and os.path.isdir(top) else out, target_dir)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def _git_archive_link(cls, git_host, repo_owner, repo_name, branch_info, commit):
        return "https://{}/{}/{}/archive/{}.zip".format(
            git_host, repo_owner, repo_name, commit or branch_info
        )
