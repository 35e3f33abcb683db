"""The ground: small helpers any stage may use (atomic files, statistics, CPU budgets, the process
lifeline, progress lines, credential checks, disk faults). They import nothing of benchgate but
`errors`, so they can be read and tested alone.
"""
