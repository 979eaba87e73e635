"""The API process, assembled: a projection worker's read routes, the command gateway and the live feeds."""
