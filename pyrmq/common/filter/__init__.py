"""Message filters evaluated on the broker and the client alike: SQL92
expressions (sql92)."""

from pyrmq.common.filter.sql92 import Sql92Error, Sql92Filter, compile_sql92

__all__ = ["Sql92Error", "Sql92Filter", "compile_sql92"]
