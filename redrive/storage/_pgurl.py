"""The Postgres journal URL: its ``partitions=`` option, its password hidden, its connect error."""

from __future__ import annotations

import contextlib
import re
import urllib.parse

import psycopg

_PASSWORD = re.compile(r"(://[^:/@]*:)[^@]*@")


def _redacted(url: str) -> str:
    """Return ``url`` with its password (if any) replaced by ``***``."""
    return _PASSWORD.sub(r"\1***@", url)


def _unreachable(url: str, exc: psycopg.Error) -> ConnectionError:
    """The one-line error for a journal database that cannot be connected to."""
    said = " ".join(str(exc).split())
    with contextlib.suppress(ValueError):
        password = urllib.parse.urlsplit(url).password
        if password:
            said = said.replace(password, "***")
    return ConnectionError(
        f"cannot connect to the Postgres journal {_redacted(url)}: {said}. Check the URL "
        "(host, port, user, database name) and that the server is running and accepts this "
        "user; the database must exist (create it with `createdb`), redrive creates only "
        "its tables."
    )


def _take_query(url: str, name: str) -> tuple[str, str | None]:
    """Take ``name=VALUE`` out of the URL's query (libpq would refuse it): (url, last VALUE)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    found = [v for k, v in query if k == name]
    if not found:
        return url, None
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != name])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), found[-1]


def _schema_option(url: str, given: str | None) -> tuple[str, str | None]:
    """Take ``schema=NAME`` out of the URL's query (the CLI's way to name a journal's schema).

    Raises:
        ValueError: NAME differs from ``given``.
    """
    url, found = _take_query(url, "schema")
    if found is None:
        return url, given
    if given is not None and given != found:
        raise ValueError(f"schema={given!r} and ?schema={found} in the URL differ")
    return url, found


def _partitions_option(url: str, given: int | None) -> tuple[str, int | None]:
    """Take ``partitions=N`` out of the URL's query (libpq would refuse it).

    Raises:
        ValueError: N is not an integer from 2 to 1024, or differs from ``given``.
    """
    url, found = _take_query(url, "partitions")
    if found is None:
        value = given
    else:
        try:
            value = int(found)
        except ValueError:
            raise ValueError(
                f"partitions={found!r} in the journal URL: give a whole number, e.g. ?partitions=8"
            ) from None
        if given is not None and given != value:
            raise ValueError(f"partitions={given} and ?partitions={value} in the URL differ")
    if value is not None and not 2 <= value <= 1024:
        raise ValueError(f"partitions={value}: use 2 to 1024 hash partitions (or none)")
    return url, value
