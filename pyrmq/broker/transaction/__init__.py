"""Transactional messages: half messages, END_TRANSACTION, check-back."""

from pyrmq.broker.transaction.check import EndTransactionProcessor, TransactionalMessageCheckService
from pyrmq.broker.transaction.service import TransactionalMessageService

__all__ = [
    "EndTransactionProcessor",
    "TransactionalMessageCheckService",
    "TransactionalMessageService",
]
