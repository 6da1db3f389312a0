"""`core.layout`: TileLang's `tilelang.layout` names that Metal kernels use
(`make_swizzled_layout`, `Layout`, `Fragment`); see core/language/layout.py."""

from core.language.layout import Fragment, Layout, make_swizzled_layout

__all__ = ["Fragment", "Layout", "make_swizzled_layout"]
