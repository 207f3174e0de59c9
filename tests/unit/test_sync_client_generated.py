"""``Client`` and ``RawClient`` follow ``AsyncClient`` by generation, never by hand."""

from __future__ import annotations

import inspect

from awa import AsyncClient, Client, RawClient
from awa.entrypoints import _sync_codegen


def test_the_generated_module_is_current() -> None:
    current = _sync_codegen.TARGET.read_text(encoding="utf-8")
    assert current == _sync_codegen.render(), (
        "awa/entrypoints/_client_sync_generated.py is stale: "
        "run python -m awa.entrypoints._sync_codegen"
    )


def _coroutine_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in inspect.getmembers(AsyncClient, inspect.iscoroutinefunction)
        if not name.startswith("_") and name not in _sync_codegen.NOT_BLOCKING - {"close"}
    }


def test_every_async_method_has_a_blocking_twin_with_the_same_keywords() -> None:
    for name, signature in _coroutine_methods().items():
        for method in (getattr(Client, name), getattr(RawClient, f"{name}_sync")):
            twin = inspect.signature(method)
            assert list(twin.parameters) == list(signature.parameters), name
            assert [p.default for p in twin.parameters.values()] == [
                p.default for p in signature.parameters.values()
            ], name
            assert not inspect.iscoroutinefunction(method), name


def test_raw_client_is_an_async_client() -> None:
    assert issubclass(RawClient, AsyncClient)
    assert inspect.iscoroutinefunction(RawClient.insert)


def test_the_extension_module_names_resolve() -> None:
    import awa
    from awa import _awa

    assert _awa.Client is awa.RawClient
    assert _awa.derive_kind("HTMLToPDF") == "html_to_pdf"
    assert _awa.CALLBACK_SIGNATURE_HEADER == "X-Awa-Signature"
    for name in _awa.__all__:
        assert getattr(_awa, name) is not None, name
    assert awa._awa is _awa
