"""Notifications sent: a run's notices (``core.notices``) POSTed, signed, to the user's URL and
piped to the user's command, off the coordinator's thread, bounded and retried, never failing
the run (``sender``); the signature (``signing``) and the two ways out (``targets``).

A leaf: the coordinator imports it; it imports only the core.
"""
