"""Sessions: signed and expiring cookies, logout, CSRF tokens, single-use login nonces."""

from __future__ import annotations

import pytest

from appliance.console.sessions import (
    NONCE_TTL_S,
    SESSION_TTL_S,
    SessionBook,
)

NOW = 1_800_000_000.0


def test_a_cookie_proves_its_session_until_it_expires() -> None:
    book = SessionBook()
    session, cookie = book.open(NOW)
    assert book.verify(cookie, NOW) == session
    assert book.verify(cookie, NOW + SESSION_TTL_S - 1) == session
    assert book.verify(cookie, NOW + SESSION_TTL_S) is None  # exactly at expiry: gone


@pytest.mark.parametrize("part", [1, 2, 3])
def test_a_cookie_changed_in_any_part_is_refused(part: int) -> None:
    book = SessionBook()
    _, cookie = book.open(NOW)
    pieces = cookie.split(".")
    pieces[part] = pieces[part][:-1] + ("0" if pieces[part][-1] != "0" else "1")
    assert book.verify(".".join(pieces), NOW) is None


def test_a_cookie_signed_by_another_process_is_refused() -> None:
    _, cookie = SessionBook().open(NOW)
    assert SessionBook().verify(cookie, NOW) is None


def test_stretching_the_expiry_breaks_the_signature() -> None:
    book = SessionBook()
    _, cookie = book.open(NOW)
    version, expires, sid, mac = cookie.split(".")
    assert book.verify(f"{version}.{int(expires) + 3600}.{sid}.{mac}", NOW) is None


@pytest.mark.parametrize("cookie", [None, "", "v1", "v1.x.y.z", "v2.1.2.3", "a" * 300])
def test_malformed_cookies_are_refused(cookie: str | None) -> None:
    assert SessionBook().verify(cookie, NOW) is None


def test_logout_ends_the_session_even_for_a_copied_cookie() -> None:
    book = SessionBook()
    session, cookie = book.open(NOW)
    book.close(session.id)
    assert book.verify(cookie, NOW) is None
    assert book.parse(cookie, NOW) is not None  # still well signed: the table decides
    assert not book.alive(session.id, NOW)


def test_the_csrf_token_belongs_to_one_session() -> None:
    book = SessionBook()
    first, _ = book.open(NOW)
    second, _ = book.open(NOW)
    assert book.csrf_ok(first, first.csrf)
    assert not book.csrf_ok(first, second.csrf)
    assert not book.csrf_ok(first, None)
    assert not book.csrf_ok(first, "")


def test_the_session_table_is_bounded_and_evicts_the_oldest() -> None:
    book = SessionBook(sessions_max=2)
    _, oldest = book.open(NOW)
    _, middle = book.open(NOW + 1)
    _, newest = book.open(NOW + 2)
    assert book.verify(oldest, NOW + 3) is None
    assert book.verify(middle, NOW + 3) is not None
    assert book.verify(newest, NOW + 3) is not None


def test_a_login_nonce_is_redeemed_once() -> None:
    book = SessionBook()
    nonce = book.issue_nonce(NOW)
    assert book.redeem_nonce(nonce, NOW + 1)
    assert not book.redeem_nonce(nonce, NOW + 2)


def test_a_login_nonce_expires_after_ten_minutes() -> None:
    assert NONCE_TTL_S == 600
    book = SessionBook()
    nonce = book.issue_nonce(NOW)
    assert book.redeem_nonce(nonce, NOW + NONCE_TTL_S - 1)
    late = book.issue_nonce(NOW)
    assert not book.redeem_nonce(late, NOW + NONCE_TTL_S)  # exactly at ten minutes: gone


def test_an_unknown_nonce_is_refused() -> None:
    book = SessionBook()
    book.issue_nonce(NOW)
    assert not book.redeem_nonce("not-a-nonce", NOW)


def test_the_nonce_table_is_bounded() -> None:
    book = SessionBook(nonces_max=2)
    first = book.issue_nonce(NOW)
    second = book.issue_nonce(NOW + 1)
    third = book.issue_nonce(NOW + 2)
    assert not book.redeem_nonce(first, NOW + 3)
    assert book.redeem_nonce(second, NOW + 3) and book.redeem_nonce(third, NOW + 3)


def test_the_book_never_shows_a_value_in_its_repr() -> None:
    book = SessionBook()
    session, cookie = book.open(NOW)
    nonce = book.issue_nonce(NOW)
    text = repr(book)
    assert session.id not in text and cookie not in text and nonce not in text
