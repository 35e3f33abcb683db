"""MLflow, and the only place it is imported: the connection (`client`), logging a run (`record`),
reading runs back (`read`), how the UI shows them (`view`), and, before compare, refreshing the
directory store's baseline from MLflow (`refresh`).
"""
