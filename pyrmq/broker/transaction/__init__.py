"""Transactional messages: half messages, END_TRANSACTION, check-back."""

from pyrmq.broker.transaction.check import TransactionalMessageCheckService
from pyrmq.broker.transaction.end_transaction import EndTransactionProcessor
from pyrmq.broker.transaction.service import TransactionalMessageService

__all__ = [
    "EndTransactionProcessor",
    "TransactionalMessageCheckService",
    "TransactionalMessageService",
]
