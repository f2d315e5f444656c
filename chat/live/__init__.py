"""What happens live: the event log (stored, numbered, sent after commit), its readers, and the socket."""
