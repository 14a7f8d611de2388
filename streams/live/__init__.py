"""Live sessions' plain parts: comment handling (:mod:`.schemas`, :mod:`.handling`: no Django), the viewer feeds
(:mod:`.feeds`) and the session runner (:mod:`.runner`)."""
