"""GitHub access: the one port Protocol every feature uses (:mod:`bot.github.port`, exported
here), its PyGithub adapter (:mod:`bot.github.pygithub`), the dry-run recorder
(:mod:`bot.github.recording`) and artifact download and unpacking (:mod:`bot.github.artifacts`).

Importing this package does not import PyGithub: features import the Protocol and its types
from here; only the composition root and the worker build adapters.
"""

from bot.github.port import (
    DEFAULT_MAX_ARTIFACT_BYTES,
    Annotation,
    ArtifactInfo,
    CheckAction,
    CheckRun,
    Comment,
    ContentEntry,
    DispatchResult,
    FileChange,
    GitHubError,
    GitHubNotFound,
    GitHubPort,
    GitHubRetryableError,
    GitHubValidationError,
    GitRemote,
    InlineComment,
    IssueInfo,
    PullInfo,
    Review,
    ReviewComment,
    WorkflowRunInfo,
    parse_timestamp,
)

__all__ = [
    "DEFAULT_MAX_ARTIFACT_BYTES",
    "Annotation",
    "ArtifactInfo",
    "CheckAction",
    "CheckRun",
    "Comment",
    "ContentEntry",
    "DispatchResult",
    "FileChange",
    "GitHubError",
    "GitHubNotFound",
    "GitHubPort",
    "GitHubRetryableError",
    "GitHubValidationError",
    "GitRemote",
    "InlineComment",
    "IssueInfo",
    "PullInfo",
    "Review",
    "ReviewComment",
    "WorkflowRunInfo",
    "parse_timestamp",
]
