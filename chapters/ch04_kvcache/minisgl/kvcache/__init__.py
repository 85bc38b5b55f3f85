"""Where keys and values of past tokens live, and who owns which slot."""
