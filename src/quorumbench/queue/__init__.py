"""Task leasing behind one TaskQueue interface: in the database, or Redis Streams."""
