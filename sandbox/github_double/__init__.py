"""The one local GitHub double of the test suite (see README.md here)."""

from .openapi import OpenAPISubset
from .server import Call, Fault, GitHubDouble, HTTPError, Pull, RepoState, default_openapi_path

__all__ = [
    "Call",
    "Fault",
    "GitHubDouble",
    "HTTPError",
    "OpenAPISubset",
    "Pull",
    "RepoState",
    "default_openapi_path",
]
