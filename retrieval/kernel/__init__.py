"""The kernel every room builds on: errors, settings, the message model, tokens, validation.

It imports nothing else of semhist, so the write path, the query path, the store and the front
ends can all depend on it without depending on one another.
"""
