"""The warehouse: schema (SQLModel), bulk writes and SQL views over DuckDB."""

from warehouse.store import Warehouse, WarehouseError

__all__ = ["Warehouse", "WarehouseError"]
