"""The transports of the env-side feed: in-process, ZeroMQ and Ray (see :mod:`.base`).

The Ray transport (:mod:`.ray`) imports Ray and is imported only for ``"ray://..."`` addresses.
"""
